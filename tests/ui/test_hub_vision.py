"""The Hub tab with a vision model's repository: the projector is offered with the model, and the
one that fits follows the model's download into the same folder (real widgets, offscreen, the fake
Hub on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests.hub.conftest import Models, gpu_target
from tests.hub.fake_hub import FakeHub


def test_the_fitting_projector_follows_the_model(qtbot: QtBot, hub: FakeHub, vision_repo: str, models: Models) -> None:
    from vrampilot.ui.hub.controller import HubController
    from vrampilot.ui.hub.view import HubView
    from vrampilot.ui.workers import Tasks

    view = HubView(HubController(Tasks(), target=gpu_target(vram_gib=8), n_ctx=4096))
    hub_c = view.controller
    qtbot.addWidget(view)
    view.show()
    models_saved: list[str] = []
    hub_c.model_downloaded.connect(models_saved.append)

    hub_c.open_repo(vision_repo)
    qtbot.waitUntil(lambda: "tiny-llama-F16.gguf" in view.items, timeout=10000)
    assert view.with_projector.isVisible() and view.with_projector.isChecked()
    view.files.setCurrentItem(view.items["tiny-llama-F16.gguf"])
    with qtbot.waitSignal(hub_c.projector_downloaded, timeout=30000) as sig:
        qtbot.mouseClick(view.download_b, Qt.MouseButton.LeftButton)
    projector = Path(sig.args[0])
    assert projector.name == "mmproj-F16.gguf"  # the one of the three that fits the model
    assert [Path(p).name for p in models_saved] == ["tiny-llama-F16.gguf"]  # the projector is no model to plan
    assert Path(models_saved[0]).parent == projector.parent
    assert not (projector.parent / "mmproj-a-large-F16.gguf").exists()
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=5000)
    assert "sha256 verified" in view.progress_label.text()

    # Unchecked: the model alone.
    hub_c.open_repo(vision_repo)
    qtbot.waitUntil(lambda: "mmproj-F16.gguf" in view.items, timeout=10000)
    view.with_projector.setChecked(False)
    view.files.setCurrentItem(view.items["tiny-llama-F16.gguf"])
    served = hub.served("mmproj-F16.gguf")
    with qtbot.waitSignal(hub_c.model_downloaded, timeout=30000):
        qtbot.mouseClick(view.download_b, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not hub_c.downloading, timeout=5000)
    assert hub.served("mmproj-F16.gguf") == served

    # A repository without projectors does not offer one.
    hub.add_repo("test/plain-GGUF", {"tiny-llama-F16.gguf": models.tiny_llama})
    hub_c.open_repo("test/plain-GGUF")
    qtbot.waitUntil(lambda: hub_c.listing is not None and hub_c.listing.repo_id == "test/plain-GGUF", timeout=10000)
    assert not view.with_projector.isVisible()
    view.shutdown()
