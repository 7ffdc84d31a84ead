"""The Hub tab, offscreen, against the fake Hub: search -> results -> files with badges -> download.

Screenshots go to test-artifacts/hub-*.png.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from tests import waits
from tests.hub.conftest import Models, gpu_target
from tests.hub.fake_hub import FakeHub
from tests.ui.conftest import MAX_WORK_S, StallMeter
from vrampilot.hub import Fit

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def shot(widget: QWidget, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"hub-{name}.png"
    QApplication.processEvents()
    assert widget.grab().save(str(path))
    return path


@pytest.fixture
def mixed_repo(hub: FakeHub, models: Models, tiny_repo: str) -> str:
    hub.add_repo(
        "bartowski/Mixed-7B-GGUF",
        {
            "qwen2.5-7b-instruct-Q4_K_M.gguf": models.qwen7b,
            "llama-3.1-8b-instruct-Q4_K_M.gguf": models.llama8b_same_size,
            "gemma-3-27b-it-Q4_K_M.gguf": models.gemma27b,
            "tiny-llama-F16.gguf": models.tiny_llama,
            "mmproj-tiny-f16.gguf": models.mmproj,
        },
        downloads=123_456,
        likes=321,
        days_ago=3,
        gguf={"architecture": "qwen2", "total": 7_615_616_512},
    )
    hub.add_repo(
        "meta-llama/Llama-3.2-1B-Instruct-GGUF",
        {"l-Q8_0.gguf": models.tiny_llama_q8},
        gated=True,
        downloads=80_000,
        likes=900,
        license="llama3.2",
        gguf={"architecture": "llama", "total": 1_235_814_400},
    )
    return "bartowski/Mixed-7B-GGUF"


def test_search_files_badges_download(qtbot: QtBot, hub: FakeHub, mixed_repo: str, models: Models) -> None:
    from vrampilot.ui.hub.controller import HubController
    from vrampilot.ui.hub.view import HubView
    from vrampilot.ui.workers import Tasks

    # 6.25 GiB of VRAM and 12 GiB of RAM at 32K context: fits, partial offload, too large. (At 6.5
    # GiB the 8B model now fits whole with a q4_0 cache, by 4 MiB: one logit row is reserved.)
    view = HubView(HubController(Tasks(), target=gpu_target(vram_gib=6.25, ram_gib=12), n_ctx=32768))
    hub_c = view.controller
    qtbot.addWidget(view)
    view.resize(1280, 820)
    view.show()
    stalls = StallMeter()
    stalls.start()

    qtbot.keyClicks(view.query, "GGUF")
    qtbot.mouseClick(view.search_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.table.rowCount() == 3, timeout=10000)
    assert view.table.item(0, 0).text() == mixed_repo  # type: ignore[union-attr]  # most downloaded first; rows exist
    assert "(gated)" in view.table.item(1, 0).text()  # type: ignore[union-attr]  # the row exists
    shot(view, "search")

    view.table.selectRow(0)
    qtbot.waitUntil(lambda: hub_c.listing is not None and len(hub_c.rows) == 5, timeout=10000)
    waits.until(qtbot, lambda: all(r.badge or r.error for r in hub_c.rows.values() if not r.model.is_mmproj), cpu_s=30)
    fits = {name: hub_c.badge_for(name) for name in hub_c.rows}
    assert fits["qwen2.5-7b-instruct-Q4_K_M.gguf"].fit is Fit.GPU  # type: ignore[union-attr]  # every listed file has a badge
    assert fits["llama-3.1-8b-instruct-Q4_K_M.gguf"].fit is Fit.PARTIAL  # type: ignore[union-attr]  # every listed file has a badge
    assert fits["gemma-3-27b-it-Q4_K_M.gguf"].fit is Fit.TOO_LARGE  # type: ignore[union-attr]  # every listed file has a badge
    assert fits["tiny-llama-F16.gguf"].fit is Fit.GPU  # type: ignore[union-attr]  # every listed file has a badge
    item = view.items["qwen2.5-7b-instruct-Q4_K_M.gguf"]
    assert item.text(3).endswith("tok/s")
    assert view.files.itemWidget(item, 2) is not None  # the coloured badge
    shot(view, "files")

    # Download the small one, slowly enough to watch it and pause it.
    hub.throttle_bps = 1_500_000
    view.files.setCurrentItem(view.items["tiny-llama-F16.gguf"])
    assert view.download_b.isEnabled()
    qtbot.mouseClick(view.download_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: 150 < view.progress.value() < 700, timeout=10000)
    assert "MiB/s" in view.progress_label.text() or "KiB/s" in view.progress_label.text()
    assert "left" in view.progress_label.text()
    shot(view, "downloading")
    qtbot.mouseClick(view.pause_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=10000)
    assert view.pause_b.text() == "Resume" and view.pending_label.isVisible()
    have = view.progress.value()

    hub.throttle_bps = 6_000_000
    with qtbot.waitSignal(hub_c.model_downloaded, timeout=15000) as sig:
        qtbot.mouseClick(view.pause_b, Qt.MouseButton.LeftButton)
    path = Path(sig.args[0])
    assert path.read_bytes() == models.tiny_llama.read_bytes()
    assert view.progress.value() == 1000 and have < 1000
    last = hub.file_requests("tiny-llama-F16.gguf")[-1]
    assert last.range != "bytes=0-" and last.bytes_sent < models.tiny_llama.stat().st_size
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=5000)
    assert "sha256 verified" in view.progress_label.text()
    assert not view.pending_label.isVisible()
    shot(view, "done")

    stalls.stop()
    assert stalls.max_work_s < MAX_WORK_S, stalls.report()
    view.shutdown()


def test_gated_repo_and_sign_in(qtbot: QtBot, hub: FakeHub, mixed_repo: str, hf_env: Path) -> None:
    from vrampilot.ui.hub.controller import HubController
    from vrampilot.ui.hub.view import HubView
    from vrampilot.ui.workers import Tasks

    view = HubView(HubController(Tasks(), target=gpu_target(vram_gib=8)))
    hub_c = view.controller
    qtbot.addWidget(view)
    view.resize(1100, 700)
    view.show()
    gated = "meta-llama/Llama-3.2-1B-Instruct-GGUF"
    hub_c.open_repo(gated)
    qtbot.waitUntil(lambda: "l-Q8_0.gguf" in hub_c.rows and hub_c.rows["l-Q8_0.gguf"].error is not None, timeout=10000)
    assert view.items["l-Q8_0.gguf"].text(2) == "sign in to check"
    view.files.setCurrentItem(view.items["l-Q8_0.gguf"])
    qtbot.mouseClick(view.download_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "gated or private" in view.status.text(), timeout=10000)
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=5000)

    hub.add_user("hf_ok", "alice")
    hub.repos[gated].granted_tokens.add("hf_ok")
    dlg = view.sign_in()
    qtbot.keyClicks(dlg.token_edit, "hf_ok")
    shot(dlg, "sign-in")
    dlg.check()
    qtbot.waitUntil(lambda: view.account.text().startswith("Signed in"), timeout=10000)
    assert (hf_env / "token").read_text() == "hf_ok"
    qtbot.waitUntil(lambda: hub_c.rows["l-Q8_0.gguf"].badge is not None, timeout=10000)
    with qtbot.waitSignal(hub_c.model_downloaded, timeout=10000):
        qtbot.mouseClick(view.download_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=5000)
    assert "sign in to download" not in view.repo_label.text()
    shot(view, "gated")
    view.shutdown()
