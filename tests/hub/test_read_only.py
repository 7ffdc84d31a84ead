"""`hub download` with the app's data folder or the Hugging Face cache on a read-only mount (see
tests/cli/test_read_only.py): one line that names the folder and the setting that moves it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli.test_read_only import read_only
from tests.hub.fake_hub import FakeHub

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("folder", "setting"), [("VRAMPILOT_HOME", "VRAMPILOT_HOME"), ("HF_HOME", "HF_HOME")])
def test_download_into_a_read_only_folder_says_which_and_what_moves_it(
    hub: FakeHub, tiny_repo: str, tmp_path: Path, folder: str, setting: str
) -> None:
    homes = {"VRAMPILOT_HOME": tmp_path / "vp", "HF_HOME": tmp_path / "hf"}
    for home in homes.values():
        home.mkdir()
    proc = read_only(
        homes[folder],
        [sys.executable, "-m", "vrampilot", "hub", "download", tiny_repo, "tiny-llama-F16.gguf"],
        env={k: str(v) for k, v in homes.items()},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("vrampilot: ")]
    assert len(errors) == 1 and str(homes[folder]) in errors[0] and "Read-only" in errors[0], errors
    assert f"{setting} moves" in errors[0]
    assert not list(homes[folder].iterdir())
    assert hub.served("tiny-llama-F16.gguf") == 0
