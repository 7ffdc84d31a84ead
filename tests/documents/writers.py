"""Documents the tests write: PDFs (text layer, scanned, encrypted) with fpdf2 and pypdf, Word
files with python-docx, and a long synthetic report whose facts sit in known sections."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def write_pdf(path: Path, pages: Sequence[Sequence[str]]) -> Path:
    """One PDF page per item; each page is a list of paragraphs (blank line between them)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_auto_page_break(auto=False)
    pdf.set_font("Helvetica", size=10)
    for paras in pages:
        pdf.add_page()
        for para in paras:
            pdf.multi_cell(0, 5, para)
            pdf.ln(5)
    pdf.output(str(path))
    return path


def write_scanned_pdf(path: Path, n_pages: int = 2) -> Path:
    """Pages that hold only an image, as a scanner writes them: no text layer."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw

    img_path = path.with_suffix(".png")
    img = Image.new("L", (400, 200), 255)
    ImageDraw.Draw(img).text((20, 80), "This text is only pixels.", fill=0)
    img.save(img_path)
    pdf = FPDF()
    for _ in range(n_pages):
        pdf.add_page()
        pdf.image(str(img_path), x=10, y=10, w=180)
    pdf.output(str(path))
    img_path.unlink()
    return path


def write_encrypted_pdf(path: Path, password: str = "secret", *, user_password: bool = True) -> Path:
    from pypdf import PdfReader, PdfWriter

    plain = write_pdf(path.with_name("plain-" + path.name), [["Confidential numbers: 42."]])
    writer = PdfWriter(clone_from=PdfReader(str(plain)))
    writer.encrypt(
        user_password=password if user_password else "", owner_password="owner-" + password, algorithm="AES-128"
    )
    with path.open("wb") as f:
        writer.write(f)
    plain.unlink()
    return path


def write_docx(path: Path, sections: Sequence[tuple[str, Sequence[str]]], table: Sequence[Sequence[str]] = ()) -> Path:
    import docx

    d = docx.Document()
    d.add_heading("Report", level=0)
    for title, paras in sections:
        d.add_heading(title, level=1)
        for p in paras:
            d.add_paragraph(p)
    if table:
        t = d.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                t.cell(r, c).text = cell
    d.save(str(path))
    return path


# -- a long report with known facts ------------------------------------------------------------
FACILITIES = [
    "North Reservoir",
    "Harbor Pumping Station",
    "Elm Street Substation",
    "Quarry Hill Water Tower",
    "Riverside Treatment Plant",
    "Old Mill Dam",
    "Cedar Valley Wind Farm",
    "Eastgate Bus Depot",
    "Granite Bridge",
    "Lakeshore Desalination Unit",
    "Southfield Landfill",
    "Maple Tunnel",
    "Crescent Solar Array",
    "Westbrook Sewage Works",
    "Beacon Point Lighthouse",
    "Foundry Lane Heat Plant",
    "Kingsway Overpass",
    "Willow Creek Culvert",
    "Summit Radio Mast",
    "Iron Gate Lock",
    "Orchard Road Reservoir",
    "Pinecrest Gas Terminal",
    "Marsh End Flood Barrier",
    "Copper Hill Quarry",
    "Glass Works Chimney",
    "Redfern Tram Depot",
    "Hollow Oak Pumping Station",
    "Stonebridge Aqueduct",
    "Fairview Cable Car",
    "Ashford Grain Silo",
    "Bellwether Observatory",
    "Tidewater Ferry Terminal",
]
FIRST = [
    "Lotte",
    "Arjun",
    "Mireille",
    "Tomasz",
    "Keiko",
    "Obinna",
    "Sunniva",
    "Rafael",
    "Ingrid",
    "Dmitri",
    "Amara",
    "Henrik",
    "Yusuf",
    "Colette",
    "Bartholomew",
    "Priya",
]
LAST = [
    "Varga",
    "Okonkwo",
    "Lindqvist",
    "Castellanos",
    "Haverford",
    "Nakamura",
    "Petrov",
    "Oyelaran",
    "Brandt",
    "Quintero",
    "Fairweather",
    "Szabo",
    "Mbeki",
    "Delacroix",
    "Thorsen",
    "Iyer",
]
DISTRICTS = ["Northgate", "Harborside", "Old Town", "Riverside", "Eastfield", "Westmarch", "Highcliff", "Lowmoor"]
MATERIALS = ["reinforced concrete", "cast iron", "weathering steel", "brick masonry", "timber", "granite blocks"]
FILLER = [
    "Routine inspections are carried out every spring by the municipal maintenance team, who record "
    "wear, corrosion and any damage in the asset register.",
    "The budget committee reviews the operating costs each year and compares them with neighbouring "
    "cities of a similar size.",
    "Public tours are offered on the first Saturday of each month, and the visitor centre displays "
    "photographs from the construction period.",
    "During the storms of the last decade the site remained in service, although access roads were "
    "closed for several days.",
    "A modernisation study recommended new sensors and remote monitoring, which the council approved "
    "in principle pending funding.",
]


@dataclass(frozen=True)
class Question:
    text: str
    answer: str  # a string that appears in the answer's section only
    facility: str


@dataclass(frozen=True)
class Report:
    markdown: str
    questions: tuple[Question, ...]


def long_report(seed: int = 7, n_sections: int = len(FACILITIES)) -> Report:
    """A Markdown report: one section per facility with its facts among shared filler text.

    Questions paraphrase the facts (different words than the text where English allows) and some
    leave the facility unnamed, asking by a fact instead; each answer is in exactly one section.
    """
    rng = random.Random(seed)
    lines = [
        "# Municipal Infrastructure Review",
        "",
        "This review lists the city's major structures, who built them and what they serve.",
        "",
    ]
    questions: list[Question] = []
    names = [(f, l) for f in FIRST for l in LAST]  # noqa: E741
    rng.shuffle(names)
    years = rng.sample(range(1890, 2020), n_sections)
    for i, facility in enumerate(FACILITIES[:n_sections]):
        first, last = names[i]
        engineer = f"{first} {last}"
        year = years[i]
        district = DISTRICTS[i % len(DISTRICTS)]
        households = 1000 + rng.randrange(1, 400) * 25
        material = MATERIALS[i % len(MATERIALS)]
        lines += [f"## {facility}", ""]
        lines += [
            f"The {facility} was commissioned in {year}. Its chief engineer was {engineer}, who supervised "
            f"the work from the first survey to the opening ceremony.",
            "",
            rng.choice(FILLER),
            "",
            f"Built mainly of {material}, it serves {households} households in the {district} district.",
            "",
            rng.choice(FILLER),
            "",
        ]
        questions += [
            Question(f"Who was the chief engineer in charge of building the {facility}?", engineer, facility),
            Question(f"In what year did the {facility} open?", str(year), facility),
            Question(f"How many homes does the {facility} supply?", str(households), facility),
            Question(f"Which structure did {engineer} lead the construction of?", engineer, facility),
        ]
    return Report("\n".join(lines), tuple(questions))
