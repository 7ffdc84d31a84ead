"""The Hub controller on its own, without a window or a view: the app's context on a temporary
folder, the fake Hub on 127.0.0.1 (HF_ENDPOINT) serving real GGUF files (testkit), and every state
change, signal and message checked as the view would receive it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from tests import waits
from tests.hub.conftest import Models, gpu_target
from tests.hub.fake_hub import FakeHub
from vrampilot.hub import AccessDeniedError, Fit, list_pending
from vrampilot.ui.app_context import AppContext, build_context
from vrampilot.ui.hub.controller import HubController, HubState

TINY = "tiny-llama-F16.gguf"
GATED = "meta-llama/Gated-GGUF"


@pytest.fixture
def ctx(hf_env: Path) -> Iterator[AppContext]:
    context = build_context()  # on the temporary VRAMPILOT_HOME hf_env set
    yield context
    context.close()


@pytest.fixture
def controller(ctx: AppContext, hub: FakeHub) -> Iterator[HubController]:
    c = HubController(ctx.tasks, target=gpu_target(vram_gib=8), n_ctx=4096, detect=False)
    yield c
    c.shutdown()


class Heard:
    """What the controller said, in order, as (signal name, arguments)."""

    NAMES = (
        "status",
        "error",
        "state_changed",
        "pending_changed",
        "search_started",
        "search_ended",
        "badge_pending",
        "download_discarded",
        "download_failed",
        "badge_failed",
        "token_accepted",
        "token_rejected",
    )

    def __init__(self, c: HubController) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        for name in self.NAMES:
            getattr(c, name).connect(lambda *args, n=name: self.events.append((n, args)))

    def __call__(self, name: str) -> list[Any]:
        """The values `name` carried (one-argument signals unwrapped)."""
        return [args[0] if len(args) == 1 else args for n, args in self.events if n == name]


def state_of(c: HubController) -> HubState:
    """The controller's state as read now (an `assert c.state is X` would let the checker believe
    it stays X across the calls that change it)."""
    return c.state


def open_listing(qtbot: QtBot, c: HubController, repo_id: str) -> None:
    with qtbot.waitSignal(c.listing_ready, timeout=10000):
        c.open_repo(repo_id)
    waits.until(qtbot, lambda: all(r.badge or r.error for r in c.rows.values() if not r.model.is_mmproj), cpu_s=30)


def test_search_then_files_with_badges_for_the_target_and_context(
    qtbot: QtBot, controller: HubController, tiny_repo: str
) -> None:
    heard = Heard(controller)
    with qtbot.waitSignal(controller.results_ready, timeout=10000) as sig:
        controller.search("tiny", sort="downloads", architecture=None, min_params=None, max_params=None)
        assert controller.searching
    assert not controller.searching
    assert [r.repo_id for r in sig.args[0]] == [tiny_repo] and controller.results == sig.args[0]
    assert heard("status") == ["Searching the Hub for tiny…", "1 repositories"]
    assert [n for n, _ in heard.events if n.startswith("search")] == ["search_started", "search_ended"]

    with qtbot.waitSignal(controller.results_ready, timeout=10000) as sig:
        controller.search("no-such-model", sort="downloads", architecture=None, min_params=None, max_params=None)
    assert sig.args[0] == [] and heard("status")[-1] == "No GGUF repositories match."

    open_listing(qtbot, controller, tiny_repo)
    assert controller.listing is not None and controller.listing.repo_id == tiny_repo
    assert len(controller.rows) == 4  # F16, Q8_0, a split Q4_0, the mmproj
    tiny = controller.badge_for(TINY)
    assert tiny is not None and tiny.fit is Fit.GPU and tiny.n_ctx == 4096
    assert all(r.badge is None for r in controller.rows.values() if r.model.is_mmproj)

    # A new context re-prices every badge; the view hears it first, to show "reading header…".
    with qtbot.waitSignal(controller.context_changed, timeout=1000) as changed:
        controller.set_context(8192)
    assert changed.args == [8192] and controller.n_ctx == 8192
    assert (TINY, "reading header…") in heard("badge_pending")
    waits.until(qtbot, lambda: controller.badge_for(TINY) is not tiny, cpu_s=30)
    with qtbot.assertNotEmitted(controller.context_changed):
        controller.set_context(8192)  # the same context: nothing to do


def test_download_pause_resume_and_one_at_a_time(
    qtbot: QtBot,
    controller: HubController,
    hub: FakeHub,
    tiny_repo: str,
    models: Models,
) -> None:
    open_listing(qtbot, controller, tiny_repo)
    heard = Heard(controller)
    hub.throttle_bps = 1_000_000  # about two seconds for the tiny model: time to pause it
    controller.start_download(tiny_repo, TINY, listing=controller.listing)
    assert controller.state is HubState.DOWNLOADING and controller.downloading
    controller.start_download(tiny_repo, "tiny-llama-Q8_0.gguf")
    assert heard("status")[-1] == "One download at a time: pause or cancel the current one first."
    seen: list[float] = []
    controller.add_progress_listener(lambda p: seen.append(p.fraction))
    qtbot.waitUntil(lambda: bool(seen) and seen[-1] > 0.05, timeout=10000)
    controller.pause_or_resume()
    assert state_of(controller) is HubState.PAUSING
    qtbot.waitUntil(lambda: controller.state is HubState.PAUSED, timeout=10000)
    assert heard("status")[-1] == "Paused: the bytes received are kept. Resume now or after a restart."
    pending = heard("pending_changed")[-1]
    assert [(p.repo_id, p.filename) for p in pending] == [(tiny_repo, TINY)] and pending[0].have_bytes > 0

    hub.throttle_bps = 8_000_000
    with qtbot.waitSignal(controller.model_downloaded, timeout=15000) as done:
        controller.pause_or_resume()  # resumes: the key of the paused download is kept
    path = Path(done.args[0])
    assert path.read_bytes() == models.tiny_llama.read_bytes()
    last = hub.file_requests(TINY)[-1]
    assert last.range != "bytes=0-"  # resumed where it stopped, not downloaded again
    assert state_of(controller) is HubState.IDLE and heard("pending_changed")[-1] == []
    assert heard("status")[-1] == f"Saved {controller.rows[TINY].model.name} to {path}"
    assert heard("state_changed") == [
        HubState.DOWNLOADING,
        HubState.PAUSING,
        HubState.PAUSED,
        HubState.DOWNLOADING,
        HubState.IDLE,
    ]
    assert heard("error") == []


def test_cancelling_a_paused_download_discards_its_bytes(
    qtbot: QtBot,
    controller: HubController,
    hub: FakeHub,
    tiny_repo: str,
) -> None:
    heard = Heard(controller)
    hub.throttle_bps = 1_000_000
    controller.start_download(tiny_repo, TINY)
    seen: list[float] = []
    controller.add_progress_listener(lambda p: seen.append(p.fraction))
    qtbot.waitUntil(lambda: bool(seen) and seen[-1] > 0.05, timeout=10000)
    controller.pause_or_resume()
    qtbot.waitUntil(lambda: controller.state is HubState.PAUSED, timeout=10000)
    assert len(list_pending()) == 1
    parts = list_pending()[0].part_paths
    with qtbot.waitSignal(controller.download_discarded, timeout=1000):
        controller.cancel_download()
    assert controller.state is HubState.IDLE and list_pending() == [] and controller.pending == []
    assert not any(p.exists() for p in parts)
    assert heard("state_changed")[-1] is HubState.IDLE

    # Cancelling a running download removes the partial file too, and says so.
    controller.start_download(tiny_repo, TINY)
    controller.cancel_download()
    assert state_of(controller) is HubState.CANCELLING
    qtbot.waitUntil(lambda: controller.state is HubState.IDLE, timeout=10000)
    assert heard("status")[-1] == "Download cancelled; the partial file was removed."
    assert list_pending() == []


def test_errors_become_words_and_sign_in_unlocks_a_gated_repo(
    qtbot: QtBot,
    controller: HubController,
    hub: FakeHub,
    models: Models,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub.add_repo(GATED, {"l-Q8_0.gguf": models.tiny_llama_q8}, gated=True)
    heard = Heard(controller)
    open_listing(qtbot, controller, GATED)
    assert controller.rows["l-Q8_0.gguf"].error is not None
    key, text, detail = heard("badge_failed")[-1]
    assert (key, text) == ("l-Q8_0.gguf", "sign in to check") and "gated or private" in detail

    with qtbot.waitSignal(controller.download_failed, timeout=10000) as failed:
        controller.start_download(GATED, "l-Q8_0.gguf", listing=controller.listing)
    assert isinstance(failed.args[0], AccessDeniedError)
    assert "gated or private" in heard("error")[-1] and "AccessDeniedError" not in heard("error")[-1]
    assert controller.state is HubState.IDLE  # nothing to resume without access

    with qtbot.waitSignal(controller.token_rejected, timeout=10000) as rejected:
        controller.check_token("hf_wrong")
    assert rejected.args[0] and controller.token() is None

    hub.add_user("hf_ok", "alice")
    hub.repos[GATED].granted_tokens.add("hf_ok")
    with qtbot.waitSignal(controller.token_accepted, timeout=10000) as accepted:
        controller.check_token("hf_ok")
    assert accepted.args[0] == "alice" and controller.token() is not None
    assert heard("status")[-1] == "Signed in as alice."
    waits.until(qtbot, lambda: controller.badge_for("l-Q8_0.gguf") is not None, cpu_s=30)

    # No network: a search fails at once, in words, and the search is over.
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.no-such-host.invalid")
    with qtbot.waitSignal(controller.search_ended, timeout=10000):
        controller.search("", sort="downloads", architecture=None, min_params=None, max_params=None)
    said = heard("error")[-1]
    assert "cannot reach the Hub" in said and "cannot be looked up" in said and "[Errno" not in said
    assert not controller.searching
