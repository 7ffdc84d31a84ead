"""A vision model's repository on the (fake, local HTTP) Hub: the projector that fits the model is
found by reading the projectors' headers by range request, downloaded with the model into the
same snapshot folder (resumed and verified like any GGUF), and found there by `--mmproj auto`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.mmproj import write_projector
from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub
from vrampilot.cli import main
from vrampilot.gguf import load_model_spec
from vrampilot.hub.files import list_repo_files
from vrampilot.hub.remote import matching_remote_projector


def test_the_projector_that_fits_is_found_by_its_header(hub: FakeHub, vision_repo: str, models: Models) -> None:
    listing = list_repo_files(vision_repo)
    assert sorted(m.first.filename for m in listing.mmproj) == [
        "mmproj-F16.gguf",
        "mmproj-a-large-F16.gguf",
        "mmproj-b-notclip.gguf",
    ]
    found = matching_remote_projector(listing, load_model_spec(models.tiny_llama))
    assert found is not None and found.first.filename == "mmproj-F16.gguf"
    # Headers only, by range request: the fitting projector (over 1 MiB) was not fetched whole.
    requests = hub.file_requests("mmproj-F16.gguf")
    assert requests and all(r.range for r in requests)
    fits = listing.find("mmproj-F16.gguf")
    assert fits is not None and hub.served("mmproj-F16.gguf") < fits.total_bytes


def test_download_with_its_projector_resumes_and_plans_with_it(
    hub: FakeHub, vision_repo: str, models: Models, capsys: pytest.CaptureFixture[str]
) -> None:
    # The headers, read once and kept (by sha256): the server below stops in the download proper.
    matching_remote_projector(list_repo_files(vision_repo), load_model_spec(models.tiny_llama))
    hub.stop_after["mmproj-F16.gguf"] = 2_000_000
    assert main(["hub", "download", vision_repo, "tiny-llama-F16.gguf", "--with-mmproj"]) == 2
    assert "lost the connection" in capsys.readouterr().err
    hub.start()
    assert main(["hub", "download", vision_repo, "tiny-llama-F16.gguf", "--with-mmproj"]) == 0
    cap = capsys.readouterr()
    assert "resuming: 1.91 MiB already here" in cap.err
    assert "vision projector verified and saved beside the model" in cap.err
    model = Path(cap.out.strip())
    projector = model.parent / "mmproj-F16.gguf"
    assert projector.is_file() and not (model.parent / "mmproj-a-large-F16.gguf").exists()

    assert main(["plan", str(model), "--cpu-only", "--ctx", "1024", "--mmproj", "auto", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["projector"]["path"] == str(projector)
    assert planned["projector"]["projector_type"] == "gemma3"
    assert planned["settings"]["mmproj_path"] == str(projector)
    assert (
        planned["memory"]["projector"]["host"]
        == planned["projector"]["weights_bytes"] + planned["projector"]["compute_bytes"]
    )


def test_a_repository_without_a_fitting_projector_says_so(
    hub: FakeHub, models: Models, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hub.add_repo(
        "test/other",
        {
            "tiny-llama-F16.gguf": models.tiny_llama,
            "mmproj-x.gguf": write_projector(tmp_path / "x.gguf", "mlp", n_embd_text=64),
        },
    )
    assert main(["hub", "download", "test/other", "tiny-llama-F16.gguf", "--with-mmproj"]) == 1
    assert "no projector in test/other fits tiny-llama-F16.gguf (tried mmproj-x.gguf)" in capsys.readouterr().err
