"""machine-speed.json written by earlier versions still loads, through the one codec and its
migration steps (speed/codec.py, speed/store.py).

data/machine-speed-v1.json was written by the hand-written converters the codec replaced (schema 1):
a record with every field it had at the end ("modern"), one from before most of them existed
("early": no short-row or MoE rates, no busy flags, reference run, pace or per-model factors) and
one never measured. data/machine-speed-v1-as-read.json is what those converters read from each
record, written back: the codec must read the same records."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vrampilot.speed.codec import decode, encode, meta
from vrampilot.speed.measured import MachineSpeed, SpeedFactors
from vrampilot.speed.store import FORMAT_VERSION, load_machine_speed, update_machine_speed

DATA = Path(__file__).with_name("data")


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    shutil.copy(DATA / "machine-speed-v1.json", tmp_path / "machine-speed.json")
    return tmp_path


def test_records_of_the_old_format_read_as_the_old_converters_read_them(old_file: Path) -> None:
    as_read = json.loads((DATA / "machine-speed-v1-as-read.json").read_text())
    assert set(as_read) == {"early", "never-measured", "modern"}
    for fingerprint, expected in as_read.items():
        speed = load_machine_speed(fingerprint, old_file)
        assert speed.fingerprint == fingerprint
        assert encode(speed) == expected, fingerprint
    early = load_machine_speed("early", old_file)
    assert early.probe is not None and early.probe.kernels[0].decode_short_gbps == early.probe.kernels[0].decode_gbps
    assert early.probe.elementwise is None and early.probe.reference is None and not early.probe.busy
    assert [f.model for f in early.factors] == ["", ""] and early.last_replies[0].pace_share is None
    modern = load_machine_speed("modern", old_file)
    assert modern.probe is not None and modern.probe.reference is not None and modern.devices


def test_an_old_file_is_rewritten_in_the_current_schema_keeping_every_machine(old_file: Path) -> None:
    before = {fp: load_machine_speed(fp, old_file) for fp in ("early", "never-measured", "modern")}
    learned = update_machine_speed("early", lambda m: m.with_pace(1, 2.5), old_file)
    data = json.loads((old_file / "machine-speed.json").read_text())
    assert data["version"] == FORMAT_VERSION == 2
    assert not list(old_file.glob("machine-speed.kept-*"))  # read, not set aside
    assert load_machine_speed("early", old_file) == learned
    for fp in ("never-measured", "modern"):  # the other machines' records, migrated as they were
        assert load_machine_speed(fp, old_file) == before[fp]


def test_a_current_record_lacking_a_field_is_damaged_not_filled_with_a_guess(tmp_path: Path) -> None:
    # Reading needs every field of the current schema: only a migration step fills older records.
    record = encode(MachineSpeed("m", factors=(SpeedFactors("cpu:x", (0.9,)),)))
    del record["factors"][0]["model"]
    with pytest.raises(KeyError):
        decode(MachineSpeed, record)
    (tmp_path / "machine-speed.json").write_text(json.dumps({"version": FORMAT_VERSION, "machines": {"m": record}}))
    assert load_machine_speed("m", tmp_path) == MachineSpeed("m")  # ignored: nothing measured


@dataclass(frozen=True)
class _Inner:
    value: float = field(metadata=meta(digits=2))


@dataclass(frozen=True)
class _Outer:
    name: str = field(metadata=meta(key="type"))
    inner: tuple[_Inner, ...]
    maybe: _Inner | None
    count: int
    runtime: float = field(default=1.5, metadata=meta(stored=False))


def test_the_codec_follows_types_and_field_metadata() -> None:
    outer = _Outer("a", (_Inner(1.234), _Inner(2.0)), None, 3, runtime=9.0)
    data = encode(outer)
    assert data == {"type": "a", "inner": [{"value": 1.23}, {"value": 2.0}], "maybe": None, "count": 3}
    assert decode(_Outer, json.loads(json.dumps(data))) == _Outer("a", (_Inner(1.23), _Inner(2.0)), None, 3)
    assert decode(_Outer, {**data, "maybe": {"value": "4"}, "count": "5", "extra": 1}).maybe == _Inner(4.0)
    for bad in ({**data, "inner": "x"}, {**data, "count": "many"}, {**data, "inner": [[1]]}):
        with pytest.raises((TypeError, ValueError)):
            decode(_Outer, bad)
