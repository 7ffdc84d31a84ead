"""bench/hybrid.py's report: runs that split the work merge into one report, and the targets are
judged from the numbers (synthetic runs here: no model, no torch)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from testkit.benches import load_bench

METHODS = ("full", "hybrid", "window", "q4")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("hybrid")


def _run(*, texts: list[dict[str, Any]], cases: list[dict[str, Any]], config: str = "default") -> dict[str, Any]:
    return {
        "model_name": "m.gguf",
        "config": config,
        "config_description": "d",
        "config_fields": {"name": config},
        "threads": 1,
        "lengths": [8192],
        "f16_full_kv_bytes": {"8192": 1000},
        "texts": texts,
        "passkey_cases": cases,
        "passkey_trials": 8,
        "seconds": 60.0,
    }


def _text(name: str, ppl: dict[str, float]) -> dict[str, Any]:
    bytes_ = {"full": 1000, "hybrid": 99, "window": 99, "q4": 98}
    results = {
        m: {
            "ppl": {"8192": ppl[m]},
            "kv_bytes": {"8192": bytes_[m]},
            "decode_ms_per_token": 10.0,
            **({"window_tokens": {"8192": 800}} if m in ("window", "q4") else {}),
        }
        for m in METHODS
    }
    return {
        "name": name,
        "role": "r",
        "short": name.split(".")[0],
        "samples": 1,
        "results": results,
        "loss_curves": {"bucket": 256, **{m: [1.0, 2.0] for m in METHODS}},
    }


def _cases(n: int, right: dict[str, int]) -> list[dict[str, Any]]:
    return [
        {
            "length": 8192,
            "depth": (i % 5) / 4,
            "key": f"{10000 + i}",
            "prompt_tokens": 8190,
            **{m: i < right[m] for m in METHODS},
            **{f"{m}_text": " 1" for m in METHODS},
        }
        for i in range(n)
    ]


def test_split_runs_merge_into_one_report_with_intervals(bench: ModuleType, tmp_path: Path) -> None:
    ppl = _run(
        texts=[
            _text("eval.txt", {"full": 26.0, "hybrid": 26.4, "window": 27.0, "q4": 26.9}),
            _text("dev.txt", {"full": 70.0, "hybrid": 72.0, "window": 73.0, "q4": 71.0}),
        ],
        cases=[],
    )
    pk = _run(texts=[], cases=_cases(40, {"full": 30, "hybrid": 28, "window": 5, "q4": 29}))
    data = bench.merge_runs([ppl, pk])
    assert len(data["texts"]) == 2 and len(data["passkey_cases"]) == 40 and data["seconds"] == 120.0
    t = bench.targets(data)
    assert t["ok"]["bytes"] and t["ok"]["ppl eval"] and not t["ok"]["ppl dev"]  # +1.5% and +2.9%
    assert not t["ok"]["ppl dev vs q4"] and t["ok"]["ppl eval vs window"]
    # 28/40 against the full cache's 30/40, whose lower 95% bound is 59.8%: met; and more than 5/40,
    # not more than 29/40.
    assert t["ok"]["passkey"] and t["ok"]["passkey vs window"] and not t["ok"]["passkey vs q4"]
    data["targets"] = t
    bench.write_report(tmp_path / "r.md", data, "plot.png")
    report = (tmp_path / "r.md").read_text(encoding="utf-8")
    lo, hi = bench._wilson(28, 40)
    assert f"28/40 ({lo:.0%}-{hi:.0%})" in report and "(lower bound 60%) -> met" in report


def test_runs_of_other_configs_or_the_same_measurement_are_refused(bench: ModuleType) -> None:
    ppl = _run(texts=[_text("eval.txt", dict.fromkeys(METHODS, 1.0))], cases=[])
    with pytest.raises(ValueError, match="config"):
        bench.merge_runs([ppl, _run(texts=[], cases=_cases(5, dict.fromkeys(METHODS, 1)), config="q4-uniform")])
    with pytest.raises(ValueError, match="same text"):
        bench.merge_runs([ppl, ppl])
    pk = _run(texts=[], cases=_cases(5, dict.fromkeys(METHODS, 1)))
    with pytest.raises(ValueError, match="same text or passkey length and depth"):
        bench.merge_runs([ppl, pk, pk])
    other_depth = _run(texts=[], cases=[dict(c, depth=0.1) for c in _cases(5, dict.fromkeys(METHODS, 1))])
    assert len(bench.merge_runs([ppl, pk, other_depth])["passkey_cases"]) == 10
    changed = _run(texts=[], cases=_cases(5, dict.fromkeys(METHODS, 1)))
    changed["config_fields"] = {**changed["config_fields"], "window": 65}
    with pytest.raises(ValueError, match="settings"):
        bench.merge_runs([ppl, changed])
    reworded = _run(texts=[], cases=_cases(5, dict.fromkeys(METHODS, 1)))
    reworded["config_fields"] = {**reworded["config_fields"], "description": "new words"}
    assert len(bench.merge_runs([ppl, reworded])["passkey_cases"]) == 5


def test_fewer_passkey_cases_than_the_issue_asks_for_do_not_count_as_met(bench: ModuleType, tmp_path: Path) -> None:
    ppl = _run(texts=[_text("eval.txt", dict.fromkeys(METHODS, 1.0))], cases=[])
    pk = _run(texts=[], cases=_cases(13, {"full": 9, "hybrid": 9, "window": 0, "q4": 0}))
    data = bench.merge_runs([ppl, pk])
    t = bench.targets(data)
    assert not t["ok"]["passkey"]  # 9/13 equals the full cache, but 13 cases cannot tell
    data["targets"] = t
    bench.write_report(tmp_path / "r.md", data, "plot.png")
    assert "-> NOT SHOWN (13 cases, 40 needed)" in (tmp_path / "r.md").read_text(encoding="utf-8")


def _fields(cfg: Any) -> dict[str, Any]:
    import json

    fields: dict[str, Any] = json.loads(json.dumps(dict(cfg.__dict__), default=str))  # as bench/hybrid.py saves them
    return fields


def test_a_new_config_reuses_the_full_cache_and_baselines_only_when_they_keep_at_least_its_bytes(
    bench: ModuleType, tmp_path: Path
) -> None:
    from vrampilot.hybrid.config import SMOLLM2_135M, CacheShape, get_config

    shape = CacheShape(n_layer=30, n_head_kv=3, head_dim=64, model_shape=SMOLLM2_135M)
    old_cfg = get_config("default")
    from vrampilot.hybrid.passkey_keys import passkey_keys

    depths = [0.0, 0.25, 0.5, 0.75, 1.0]
    keys = [(d, k) for (_, d), ks in passkey_keys([8192], depths, 2).items() for k in ks]

    def cases(right: dict[str, int]) -> list[dict[str, Any]]:  # the cases a run with these depths draws
        return [{**c, "depth": d, "key": k} for c, (d, k) in zip(_cases(10, right), keys, strict=True)]

    saved = _run(
        texts=[_text("eval.txt", {"full": 26.0, "hybrid": 26.4, "window": 27.0, "q4": 26.9})],
        cases=cases({"full": 6, "hybrid": 2, "window": 0, "q4": 1}),
    )
    saved["config_fields"], saved["passkey_trials"] = _fields(old_cfg), 2
    args = ("m.gguf", [8192], ["eval.txt"], [8192], depths, 2)
    # Fewer bytes (shorter reaches everywhere): the baselines saved still hold at least the hybrid's bytes.
    fewer = old_cfg.with_(head_reach=tuple((il, h, 64) for il, h, _ in old_cfg.head_reach))
    taken, why = bench.reusable(saved, fewer, shape, *args)
    assert taken == ("full", "window", "q4"), why
    # More bytes: a reused baseline would hold fewer than the hybrid, so only the full cache is taken.
    more = old_cfg.with_(head_reach=tuple((il, h, None) for il, h, _ in old_cfg.head_reach))
    taken, why = bench.reusable(saved, more, shape, *args)
    assert taken == ("full",) and "more bytes" in why
    # Under one f16 token more: the saved baselines stand (those of this config differ by a token).
    heads = list(old_cfg.head_reach)
    il, h, r = next(x for x in heads if x[2] is not None and x[2] >= 64)
    assert r is not None
    heads[heads.index((il, h, r))] = (il, h, r + 32)  # 32 more 4-bit tokens in one KV head
    slightly = old_cfg.with_(head_reach=tuple(heads))
    taken, why = bench.reusable(saved, slightly, shape, *args)
    assert taken == ("full", "window", "q4") and "under one f16 token" in why, why
    # Another model, other lengths or other passkey cases: nothing.
    assert bench.reusable(saved, fewer, shape, "other.gguf", *args[1:])[0] == ()
    assert bench.reusable(saved, fewer, shape, "m.gguf", [4096], *args[2:])[0] == ()
    assert bench.reusable(saved, fewer, shape, *args[:-1], 8)[0] == ()
    # The same depths in another order draw other keys: refused, saying why.
    taken, why = bench.reusable(saved, fewer, shape, *args[:4], depths[::-1], 2)
    assert taken == () and "keys follow --depths in its order" in why
    assert bench.reusable(saved, fewer, shape, *args[:4], depths[:1], 2)[0] == ("full", "window", "q4")

    new = _run(
        texts=[_text("eval.txt", {"full": 0.0, "hybrid": 26.1, "window": 0.0, "q4": 0.0})],
        cases=cases({"full": 0, "hybrid": 5, "window": 0, "q4": 0}),
    )
    new["passkey_trials"] = 2
    new["reused"] = {"from": "old.json", "methods": ["full", "window", "q4"], "note": why}
    bench.fill_reused(new, saved)
    bench.fill_reused(new, saved)  # idempotent: a run saves after every case
    assert new["texts"][0]["results"]["full"]["ppl"]["8192"] == 26.0
    assert new["texts"][0]["results"]["hybrid"]["ppl"]["8192"] == 26.1
    assert sum(c["full"] for c in new["passkey_cases"]) == 6 and sum(c["hybrid"] for c in new["passkey_cases"]) == 5
    # Rendered beside a perplexity run of its own, the report still says what was reused.
    ppl = _run(texts=[_text("dev.txt", {"full": 70.0, "hybrid": 71.0, "window": 73.0, "q4": 72.0})], cases=[])
    ppl["config_fields"] = new["config_fields"] = saved["config_fields"]
    merged = bench.merge_runs([ppl, {**new, "texts": []}])
    merged["targets"] = bench.targets(merged)
    bench.write_report(tmp_path / "r.md", merged, "plot.png")
    assert "numbers from `old.json`" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_a_saved_allocation_replaces_the_config_s_reaches(bench: ModuleType, tmp_path: Path) -> None:
    # bench/hybrid.py --head-reach: what bench/hybrid_calibrate.py --select or --budgets chose.
    import json

    from vrampilot.hybrid.config import get_config

    path = tmp_path / "hybrid-select.json"
    path.write_text(json.dumps({"head_reach": [[0, 0, 6080], [0, 1, None, 0.01], [1, 2, 64]]}), encoding="utf-8")
    cfg = bench.with_head_reach(get_config("default"), path)
    assert cfg.head_reach == ((0, 0, 6080), (0, 1, None), (1, 2, 64))
    assert cfg.name == "default+hybrid-select" and cfg.window == get_config("default").window
