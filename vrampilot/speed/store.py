"""Where what this machine measured is kept: `machine-speed.json` in the data folder, per machine.

The record is keyed by a fingerprint of the hardware and of the llama.cpp build that ran the
kernels (CPU model, cores, features, RAM size, the CPU variant, the engine's recipe, the GPUs): a
new CPU, more RAM, a GPU swapped or a new engine build gives a new fingerprint, so the app measures
again instead of trusting figures from other hardware. A portable install carried between machines
keeps one record for each.

The app and the CLI may write at once (a reply learned in the window while `vrampilot chat` runs):
every change is a read-modify-write under a file lock, and the file is replaced atomically.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from vrampilot.hardware import CpuInfo, GpuInfo, LlamaBackendInfo
from vrampilot.paths import set_aside
from vrampilot.speed.codec import decode, encode
from vrampilot.speed.measured import DeviceRates, HostProbe, KernelRates, MachineSpeed

_log = logging.getLogger("vrampilot.speed.store")

FILE_NAME = "machine-speed.json"
# The schema of a machine's record (speed/codec.py reads only the current one); each older schema
# has a step in MIGRATIONS that turns its records into the next one's. A file of a newer schema
# (a newer VRAM Pilot wrote it) is kept aside, not read.
FORMAT_VERSION = 2
MACHINES_KEPT = 8


def machine_fingerprint(cpu: CpuInfo, ram_total_bytes: int, llama: LlamaBackendInfo, gpus: tuple[GpuInfo, ...]) -> str:
    """A short hash of what the speed figures depend on."""
    facts = {
        "cpu": [cpu.model_name, cpu.architecture, cpu.physical_cores, cpu.logical_cores, list(cpu.features)],
        # Rounded: the total the kernel reports moves by a few MiB between boots.
        "ram_gib": round(ram_total_bytes / (1 << 30)),
        "llama": [llama.version, llama.cpu_variant, llama.recipe_key],
        "gpus": [[g.name, g.uuid, g.memory_total_bytes] for g in gpus],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def _from_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 grew field by field, its readers filling what older files lacked: these are those
    fills. Schema 2 is schema 1 with every field written."""
    probe = record.get("probe") or None
    if probe is not None:
        for k in probe.get("kernels", ()):
            k.setdefault("decode_short_gbps", k.get("decode_gbps"))
            for key in ("prefill_moe_gflops", "decode_shortest_gbps", "matvec_overhead_us"):
                k.setdefault(key, [])
        for a in probe.get("attention", ()):
            a.setdefault("decode_ram_gflops", [])
        defaults: dict[str, Any] = {
            "cpu_variant": None,
            "others_cpu_share": 0.0,
            "app_busy": False,
            "pace_ms": [],
            "elementwise": None,
        }
        probe.update({k: v for k, v in defaults.items() if k not in probe})
        probe["reference"] = probe.get("reference") or None
    for f in record.get("factors", ()):
        for key, value in (("decode_ratios", []), ("prefill_ratios", []), ("updated_at", ""), ("model", "")):
            f.setdefault(key, value)
    for r in record.get("last_replies", ()):
        r.setdefault("pace_share", None)
        r.setdefault("set_aside", "")
    return {"factors": [], "last_replies": [], "paces": [], "devices": [], **record, "probe": probe}


# MIGRATIONS[n]: a record of schema n as a record of schema n + 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}


def _migrated(data: dict[str, Any]) -> dict[str, Any]:
    """The file's records brought to FORMAT_VERSION. A record a step cannot read stays as it was:
    the codec then finds it damaged and the app measures that machine again."""
    version = data["version"]
    machines: dict[str, Any] = data["machines"]
    for fingerprint, record in list(machines.items()):
        for step in range(version, FORMAT_VERSION):
            try:
                record = MIGRATIONS[step](copy.deepcopy(record))
            except (AttributeError, KeyError, TypeError, ValueError):
                break
        machines[fingerprint] = record
    return {**data, "version": FORMAT_VERSION, "machines": machines}


def _path(folder: Path | None) -> Path:
    if folder is None:
        from vrampilot.paths import data_dir

        folder = data_dir()
    return folder / FILE_NAME


def _read(path: Path) -> dict[str, Any]:
    return _read_or_why(path)[0]


def _read_or_why(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file's data, or an empty one and why the file there could not be used."""
    empty: dict[str, Any] = {"version": FORMAT_VERSION, "machines": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return empty, None
    except (OSError, ValueError) as exc:
        # A damaged file costs a second of measuring, never a failed start.
        _log.warning("ignoring %s: %s", path, exc)
        return empty, str(exc)
    if not isinstance(data, dict) or not isinstance(data.get("machines"), dict):
        return empty, "not a speed record"
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
        return empty, f"format {version!r}, this version reads {FORMAT_VERSION}"
    return _migrated(data), None


def load_machine_speed(fingerprint: str, folder: Path | None = None) -> MachineSpeed:
    """What was measured on this machine; an empty record (nothing measured) when nothing was."""
    record = _read(_path(folder))["machines"].get(fingerprint)
    if record is not None:
        try:
            return decode(MachineSpeed, record)
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("ignoring the speed record of this machine: %s", exc)
    return MachineSpeed(fingerprint)


def update_machine_speed(
    fingerprint: str, change: Callable[[MachineSpeed], MachineSpeed], folder: Path | None = None
) -> MachineSpeed:
    """Apply `change` to this machine's record and save it; returns the new record."""
    path = _path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=10):
        data, why = _read_or_why(path)
        if why is not None:
            # A damaged file, or one a newer VRAM Pilot wrote (its replies and probes), is kept
            # beside the new one rather than written over.
            kept = set_aside(path, "kept")
            _log.warning("kept %s as %s (%s); measuring anew", path.name, kept.name, why)
        machines: dict[str, Any] = data["machines"]
        current = MachineSpeed(fingerprint)
        if fingerprint in machines:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                current = decode(MachineSpeed, machines[fingerprint])
        new = change(current)
        machines.pop(fingerprint, None)
        machines[fingerprint] = encode(new)  # most recent last: the oldest machines go first
        for old in list(machines)[:-MACHINES_KEPT]:
            del machines[old]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    return new


def save_probe(fingerprint: str, probe: HostProbe, folder: Path | None = None, *, new: bool = True) -> MachineSpeed:
    """Store a probe. A new one (`new`) drops the CPU's learned factors: they corrected predictions
    made from the old figures (a GPU's stay; the probe does not measure GPUs), and the pace gauge's
    readings after replies: the new probe's reading is the usual again until replies read it, so
    that a probe taken again because it ran at a slow moment (MachineSpeed.probe_read_slow) is
    judged by replies after it, not taken again at every start. Kernels added to the same probe for
    another weight type (`new=False`) keep them.

    A new probe taken while other programs were busy does not replace a complete one taken at a
    quiet moment: its figures read their load, not this machine (the stored record is returned
    unchanged; `kept_quieter` tells the caller)."""

    def change(m: MachineSpeed) -> MachineSpeed:
        if not new:
            return replace(m, probe=probe)
        if kept_quieter(m, probe):
            return m
        return replace(
            m, probe=probe, factors=tuple(f for f in m.factors if not f.backend.startswith("cpu:")), paces=()
        )

    return update_machine_speed(fingerprint, change, folder)


def kept_quieter(speed: MachineSpeed, taken: HostProbe) -> bool:
    """Whether the stored probe stands over `taken`: it was measured while the machine was quiet,
    is complete for this version and replies have not shown it read a slow moment (else the app
    would measure again at every start and throw each busy result away), and `taken` was measured
    while the machine was busy."""
    from vrampilot.speed.host_probe import probe_outdated  # the probe's kernels, loaded only here

    stored = speed.probe
    return (
        stored is not None
        and taken.busy
        and not stored.busy
        and not probe_outdated(stored)
        and not speed.probe_read_slow
    )


def add_kernels(fingerprint: str, added: tuple[KernelRates, ...], folder: Path | None = None) -> MachineSpeed:
    """Add rates for weight types the stored probe lacked (measured for a model that uses them)."""

    def change(m: MachineSpeed) -> MachineSpeed:
        return replace(m, probe=m.probe.with_kernels(added)) if m.probe is not None else m

    return update_machine_speed(fingerprint, change, folder)


def save_device_rates(fingerprint: str, rates: tuple[DeviceRates, ...], folder: Path | None = None) -> MachineSpeed:
    """Store the offload devices' measurements; a device measured anew drops what its replies
    taught (they corrected predictions made from the assumed figures)."""
    names = {r.llama_name for r in rates}

    def change(m: MachineSpeed) -> MachineSpeed:
        kept = tuple(d for d in m.devices if d.llama_name not in names)
        factors = tuple(f for f in m.factors if not any(f"({n})" in f.backend for n in names))
        return replace(m, devices=(*kept, *rates), factors=factors)

    return update_machine_speed(fingerprint, change, folder)
