"""The Plan panel and `vrampilot plan` choose the same target for the same machine and RPC hosts
(one resolver: vrampilot.planner.target.resolve_target), for "This machine" and for "CPU only"
(--cpu-only): both plan across the hosts. Two real ggml-rpc-server hosts on loopback, each pinned
to a budget; the machine is the one the window was given, handed to the CLI as detected."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from tests import waits
from tests.server.test_rpc import start_rpc_host
from tests.ui.conftest import OpenWindow
from vrampilot.cli import build_parser
from vrampilot.planner.target import Target
from vrampilot.server import free_port
from vrampilot.speed import with_measured_speed


def _without_round_trips(t: Target) -> Target:
    """Each query times its own round trip to a host; everything else is the same answer."""
    return replace(t, gpus=tuple(replace(g, rtt_ms=0.0) for g in t.gpus))


def test_panel_and_cli_choose_the_same_target(
    open_window: OpenWindow, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vrampilot.commands.plan as plan_command

    hosts = [start_rpc_host(free_port()) for _ in range(2)]
    endpoints = [f"127.0.0.1:{h.argv[h.argv.index('-p') + 1]}" for h in hosts]
    rpc_text = f"{endpoints[0]}=60MiB,{endpoints[1]}=200MiB"
    machine = cpu_machine()
    # Where the speed service looks the machine up (a private module's name: patching reaches inside
    # by nature, which the stated-API rule leaves to dotted names, never imports).
    monkeypatch.setattr("vrampilot.speed.service.detect_machine", lambda: machine)
    try:
        # The CLI adds this machine's speed record to what it detects; the window is handed the same.
        w = open_window(wait_plan=False, machine=with_measured_speed(machine))
        waits.until(qtbot, lambda: w.plans.machine is not None, cpu_s=10)
        w.plans.set_rpc_hosts(rpc_text)
        waits.until(qtbot, lambda: len(w.plans.rpc_hosts) == 2, cpu_s=10)
        for key, flags in (("machine", []), ("cpu", ["--cpu-only"])):
            w.plans.set_target(key)
            cli = plan_command.target_from_args(build_parser().parse_args(["plan", *flags, "--rpc", rpc_text]))
            assert w.plans.target is not None
            assert _without_round_trips(w.plans.target) == _without_round_trips(cli), key
            assert [g.llama_name for g in cli.gpus] == ["RPC0", "RPC1"]
    finally:
        for h in hosts:
            h.stop()
