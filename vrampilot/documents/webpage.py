"""HTML to blocks with the standard library's parser: block elements become paragraphs, h1-h6
become the heading path, and script, style and navigation chrome are dropped."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from vrampilot.documents.blocks import Block

_BLOCK = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "li",
    "tr",
    "table",
    "ul",
    "ol",
    "pre",
    "blockquote",
    "br",
    "hr",
    "dd",
    "dt",
    "figcaption",
    "caption",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "body",
}
_SKIP = {"script", "style", "noscript", "template", "head", "nav", "svg"}
_CELL = {"td", "th"}


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self._buf: list[str] = []
        self._skip = 0
        self._pre = 0
        self._heading: int | None = None
        self._headings: list[tuple[int, str]] = []
        self._row: list[str] | None = None

    def _section(self) -> str:
        return " > ".join(h for _, h in self._headings)

    def _flush(self) -> None:
        raw = "".join(self._buf)
        self._buf.clear()
        text = raw.strip("\n") if self._pre else re.sub(r"[ \t\r\f\v]+", " ", raw).strip()
        text = re.sub(r" *\n *", "\n", text) if not self._pre else text
        if not text.strip():
            return
        if self._heading is not None:
            level = self._heading
            while self._headings and self._headings[-1][0] >= level:
                self._headings.pop()
            self._headings.append((level, " ".join(text.split())))
            self.blocks.append(Block(text, section=self._section(), is_heading=True))
        else:
            self.blocks.append(Block(text, section=self._section()))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
            return
        if self._skip:
            return
        if tag == "br":
            self._buf.append("\n")
            return
        if tag in _CELL:
            return
        if tag in _BLOCK:
            self._flush()
        if tag == "pre":
            self._pre += 1
        if len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
            self._heading = int(tag[1])
        if tag == "li":
            self._buf.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag in _CELL:
            self._buf.append(" | ")
            return
        if tag in _BLOCK:
            if tag == "tr":
                row = "".join(self._buf).strip().rstrip("|").strip()
                self._buf[:] = [row]
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)
            if self._heading is not None and tag.startswith("h"):
                self._heading = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def html_blocks(text: str) -> list[Block]:
    parser = _Parser()
    parser.feed(text)
    parser.close()
    return parser.blocks
