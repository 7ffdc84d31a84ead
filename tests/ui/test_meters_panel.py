"""The meter panel and status widget on scripted sessions (pytest-qt, offscreen).

Screenshots go to test-artifacts/meters-*.png for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea, QWidget
from pytestqt.qtbot import QtBot

from testkit.fake_nvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml
from tests import waits
from tests.meters.session import PEAK_GBPS, Session, plan_32k, qwen7b, session
from vrampilot.gguf import ModelSpec
from vrampilot.meters.sampler import Sampler
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.ui.meters.feed import MetersFeed
from vrampilot.ui.meters.panel import MetersPanel, MetersStatusWidget
from vrampilot.units import MIB, format_bytes

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PROCESS = 6_700 * MIB


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    return qwen7b(tmp_path_factory.mktemp("meters-ui"))


@pytest.fixture(scope="module")
def plan8(spec: ModelSpec) -> Plan:
    return plan_32k(spec)


def _shot(widget: QWidget, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    if isinstance(widget, MetersPanel):
        # As tall as its content, so the picture shows every meter without the scroll bar.
        area = widget.findChild(QScrollArea)
        assert area is not None
        content = area.widget()
        assert content is not None
        widget.show()  # layouts of a never-shown widget are not activated
        QApplication.processEvents()
        widget.resize(widget.width(), content.heightForWidth(content.width()) + 4)
        QApplication.processEvents()
        # Wrapped text gets the height it needs at this width (nothing clipped).
        for label in content.findChildren(QLabel):
            if label.isVisibleTo(widget) and label.wordWrap():
                assert label.height() >= label.heightForWidth(label.width()), label.text()
    path = ARTIFACTS / f"meters-{name}.png"
    assert widget.grab().save(str(path))
    return path


def _panel(qtbot: QtBot, s: Session) -> tuple[MetersPanel, MetersStatusWidget]:
    feed = MetersFeed(s.sampler, start=False)  # the test steps the sampler itself
    panel = MetersPanel(feed)
    status = MetersStatusWidget(feed)
    qtbot.addWidget(panel)
    qtbot.addWidget(status)
    panel.resize(460, 1560)
    status.resize(420, status.sizeHint().height())
    return panel, status


def _advance(s: Session, panel: MetersPanel, n: int) -> None:
    s.step(n)
    panel.feed.poll()


def test_session_numbers_spill_warning_and_replan(qtbot: QtBot, plan8: Plan) -> None:
    s = session(PROCESS, spill=True, windows=True, history_s=15)
    panel, status = _panel(qtbot, s)
    panel.set_plan(plan8)
    _advance(s, panel, 2 + 6 + 8)  # idle, load, decode
    panel.record_decode(41.0, duration_s=4)
    panel.feed.poll()
    bars = panel._gpu_bars[0]
    assert panel.vram_box.title() == "VRAM: NVIDIA GeForce RTX 4060 Ti"
    planned = plan8.memory.device
    assert bars.plan_bar.data().caption().startswith(f"Plan: {format_bytes(planned.total_bytes)} of 8.00 GiB")  # type: ignore[union-attr]  # the bar was given its data
    measured = bars.measured_bar.data()
    assert measured is not None
    plan_used = planned.total_bytes - planned.margin_bytes
    assert measured.caption == "Measured: 7.13 GiB of 8.00 GiB used"
    assert measured.marker_bytes == plan_used
    assert [(x.label, x.n_bytes) for x in measured.segments] == [
        ("this app", PROCESS),
        ("other programs", 600 * MIB),
        ("free", 8192 * MIB - PROCESS - 600 * MIB),
    ]
    bw = panel.bandwidth_label.text()
    gbps = plan8.speed.device_bytes_per_token * 41 / 1e9  # bytes per token x tokens/s
    assert "Last reply: 41.0 tokens/s." in bw
    assert (
        f"GPU: {gbps:.0f} GB/s of 288 GB/s peak ({gbps / PEAK_GBPS:.0%}; peak from NVML bus width x clock, "
        "assumed, not measured)"
    ) in bw
    assert "Memory controller busy 91%" in bw
    assert "as planned" in panel.warning_label.text() and not panel.replan_button.isVisible()
    assert "Everything the model reads per token is in VRAM" in panel.spill_label.text()
    assert "GPU busy 62%, core 2535 MHz, memory 9001 MHz, 67 °C, 155 W" in panel.gpu_details_label.text()
    assert f"VRAM 7.13 GiB / 8.00 GiB · 41.0 tok/s, {gbps:.0f} GB/s · CPU" in status.label.text()
    _shot(panel, "healthy")

    _advance(s, panel, 8)  # the spill episode
    panel.record_decode(9.5, duration_s=4)
    panel.feed.poll()
    text = panel.warning_label.text()
    expected = plan8.speed.decode_tps
    assert f"9.5 tokens/s, {9.5 / expected:.0%} of the planned {expected:.1f}" in text
    assert "spilled out of VRAM" in text
    assert "Prefer No Sysmem Fallback" in text
    assert panel.replan_button.isVisibleTo(panel) and panel.replan_button.text() == "Re-plan: q8_0 KV cache"
    assert "Shared GPU memory of this app: 552.00 MiB" in panel.pcie_label.text()
    assert "PCIe to GPU 9.00 GB/s, from GPU 3.00 GB/s" in panel.pcie_label.text()
    assert "spilling" in status.label.text()
    _shot(panel, "spill")
    _shot(status, "status")

    with qtbot.waitSignal(panel.replan_requested) as sig:
        qtbot.mouseClick(panel.replan_button, Qt.MouseButton.LeftButton)
    pins = sig.args[0]
    assert isinstance(pins, Pins) and (pins.type_k, pins.type_v) == ("q8_0", "q8_0")
    # Applying it: the new plan is set, the warning clears until the next reply is judged.
    panel.set_plan(plan(plan8.spec, plan8.target, pins))
    panel.feed.poll()
    assert "No reply measured yet" in panel.warning_label.text()
    assert not panel.replan_button.isVisibleTo(panel)


def test_partial_offload_panel(qtbot: QtBot, spec: ModelSpec, plan8: Plan) -> None:
    p = plan(spec, plan8.target, Pins(n_ctx=65536, type_k="f16", type_v="f16"))
    s = session(7_200 * MIB, spill=False, windows=False, history_s=15)
    panel, _status = _panel(qtbot, s)
    panel.set_plan(p)
    _advance(s, panel, 18)
    panel.record_decode(22.0, duration_s=4)
    panel.feed.poll()
    host_layers = sum(not on for on in p.memory.gpu_layers)
    assert 0 < host_layers < spec.n_layer  # the context pushes some layers off the card
    assert f"On the host: {host_layers} of {spec.n_layer} layers" in panel.spill_label.text()
    assert "System RAM:" in panel.bandwidth_label.text()
    assert "Shared GPU memory: not read (" in panel.pcie_label.text()
    _shot(panel, "partial-offload")


def test_without_nvml_ram_and_cpu_still_work(qtbot: QtBot, plan8: Plan) -> None:
    sampler = Sampler(nvml=FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    feed = MetersFeed(sampler, start=False)
    panel = MetersPanel(feed)
    status = MetersStatusWidget(panel)
    qtbot.addWidget(panel)
    qtbot.addWidget(status)
    panel.resize(460, 1000)
    panel.show()
    for _ in range(4):
        sampler.sample_once()
    feed.poll()
    assert panel.status_label.text() == "GPU meters are empty: NVML not available (libnvidia-ml.so.1 not found)."
    assert not panel.vram_box.isVisible() and not panel.spill_box.isVisible()
    assert panel.ram_bar.data() is not None and " of " in panel.ram_bar.data().caption  # type: ignore[union-attr]  # the bar was given its data
    assert "% of one core" in panel.cpu_label.text() and "threads" in panel.cpu_label.text()
    assert status.label.text().startswith("RAM ")
    # Real psutil numbers for this machine.
    total = psutil.virtual_memory().total
    assert panel.ram_bar.data().caption.endswith(f"of {format_bytes(total)} used")  # type: ignore[union-attr]  # the bar was given its data
    with qtbot.waitSignal(status.clicked):
        qtbot.mouseClick(status, Qt.MouseButton.LeftButton)
    panel.set_plan(plan8)  # a plan for a GPU this machine cannot read
    feed.poll()
    assert panel.bandwidth_box.isVisible()
    assert f"plan: {plan8.speed.decode_tps:.1f} tokens/s" in panel.bandwidth_label.text()
    _shot(panel, "no-nvml")
    sampler.close()


def test_system_ram_bandwidth_is_against_the_measured_peak_and_says_so(qtbot: QtBot, spec: ModelSpec) -> None:
    from testkit.machines import cpu_machine, measured_machine, uniform_probe
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.speed import MeasuredMachine

    sampler = Sampler(nvml=FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    feed = MetersFeed(sampler, start=False)
    panel = MetersPanel(feed)
    qtbot.addWidget(panel)
    for found, label in (
        (measured_machine(uniform_probe(12.5)), "of 25.0 GB/s measured peak, 2026-12-01 ("),
        (MeasuredMachine(cpu_machine()), "of 50.0 GB/s assumed peak ("),
    ):
        p = plan(spec, resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed), Pins(n_ctx=4096))
        panel.set_plan(p)
        sampler.sample_once()
        panel.record_decode(2.0, duration_s=2)
        feed.poll()
        gbps = p.speed.host_bytes_per_token * 2.0 / 1e9
        assert f"System RAM: {gbps:.1f} GB/s {label}" in panel.bandwidth_label.text()
    sampler.close()


def test_repaints_at_most_at_the_sampling_rate(qtbot: QtBot) -> None:
    s = session(PROCESS, spill=False, windows=False)
    panel, _status = _panel(qtbot, s)
    emitted: list[object] = []
    panel.feed.add_listener(emitted.append)
    ticks: list[None] = []
    timer = panel.feed.findChild(QTimer)  # the feed's tick: Qt's own signal, after the feed's poll
    assert timer is not None
    timer.timeout.connect(lambda: ticks.append(None))
    s.step(10)  # a burst, as after the GUI thread was busy
    # Counted in the feed's own ticks, not in wall-clock time: on a loaded machine a timer fires late.
    waits.until(qtbot, lambda: len(ticks) >= 2, cpu_s=10)
    assert len(emitted) == 1  # one repaint for the burst
    waits.until(qtbot, lambda: len(ticks) >= 4, cpu_s=10)
    assert len(emitted) == 1  # nothing new, nothing repainted


def test_live_thread_reaches_the_gui(qtbot: QtBot) -> None:
    sampler = Sampler(interval_s=0.25, nvml=FakeNvml([FakeGpu()]))
    panel = MetersPanel(sampler)  # makes its own feed and starts the sampling thread
    qtbot.addWidget(panel)
    try:
        waits.until(qtbot, lambda: "RTX 4090" in panel.vram_box.title(), cpu_s=10)
        assert sampler.running
    finally:
        panel.feed.stop()
        sampler.close()
    assert not sampler.running
