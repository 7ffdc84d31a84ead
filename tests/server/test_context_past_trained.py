"""A real llama-server and the app's own engine on the embedded model (trained for 8K) at a planned
16K context: both serve the whole 16K (issue 58, item 2). Before the plan carried YaRN scaling,
llama-server logged "the slot context (16384) exceeds the training context of the model (8192) -
capping" and reported 8192 while the app ran 16384."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import llama_cpp
import pytest

from testkit.machines import cpu_machine
from vrampilot.engine import open_llama
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server import ServerConfig, ServerProcess, free_port, tool_env, tool_path

pytestmark = pytest.mark.slow


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as r:
        data: dict[str, object] = json.loads(r.read())
        return data


def test_server_and_app_both_run_the_planned_context_past_the_trained_one(embedded_model: Path) -> None:
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=16384, n_threads=1, n_threads_batch=1),
    )
    assert p.settings.n_ctx == 16384 > p.spec.n_ctx_train
    config = ServerConfig("127.0.0.1", free_port(), None)
    argv = llama_server_argv(
        p.spec.path, p.settings, host=config.host, port=config.port, server=str(tool_path("llama-server"))
    )
    server = ServerProcess(argv, tool_env(api_key=None))
    server.start()
    try:
        server.wait_ready(config.base_url, timeout_s=120, api_key=None)
        props = _get(config.base_url + "/props")
        models = _get(config.base_url + "/v1/models")
    finally:
        server.stop()
    settings = props["default_generation_settings"]
    assert isinstance(settings, dict) and settings["n_ctx"] == 16384
    data = models["data"]
    assert isinstance(data, list) and data[0]["meta"]["n_ctx"] == 16384

    llm = open_llama(p.spec.path, p.settings)
    try:
        assert llm.n_ctx() == 16384
        # The same re-adjusted trained context llama-server compared its slot with.
        assert llama_cpp.llama_model_n_ctx_train(llm.model) == 16384
    finally:
        llm.close()
