"""What this machine measured: the speed probe of its CPU (host_probe.py, with the tiny model of
probe_model.py and the built-in model's run of reference_run.py) and of its offload devices
(device_probe.py), the pace gauge read after replies (pace.py), other programs' load meanwhile
(cpu_load.py), the record of it all and of predicted against measured replies (measured.py), kept
per machine in the data folder (store.py) and shown by `vrampilot doctor` (report.py).

Qt-free. service.py is the one way the front ends measure and read the record. The speed model that
predicts a plan's tokens/s from these figures, and learns from each reply, is the planner's
(planner/speed_model/predict.py, planner/calibration.py).

Its API is `__all__`, each name imported on first use (vrampilot/lazy_api.py): what reads a reply's
CPU share or the record loads neither the probes nor hardware detection. Its modules are private to
it (docs/development.md, "Stated APIs").
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
    from vrampilot.speed.acceptance import Acceptance, load_acceptance, p_from_rate, pair_key
    from vrampilot.speed.acceptance import record_reply as record_acceptance
    from vrampilot.speed.codec import decode as decode_record
    from vrampilot.speed.codec import encode as encode_record
    from vrampilot.speed.cpu_load import BUSY_SHARE, CpuSnapshot
    from vrampilot.speed.cpu_load import others_share as others_cpu_share
    from vrampilot.speed.cpu_load import snapshot as cpu_snapshot
    from vrampilot.speed.host_probe import (
        ALL_WEIGHT_TYPES,
        CORE_WEIGHT_TYPES,
        ProbeCancelled,
        bits_per_weight,
        ggml_type_id,
        missing_kernels,
        probe_outdated,
        stream_bytes,
    )
    from vrampilot.speed.measured import (
        FACTOR_WINDOW,
        LONG_ROW,
        MODEL_FACTORS_KEPT,
        PACES_KEPT,
        PROBE_PACE_READINGS,
        RATIO_MAX,
        RATIO_MIN,
        SHORT_ROW,
        SHORTEST_ROW,
        SLOW_PACE,
        AttentionRates,
        DeviceRates,
        ElementwiseRates,
        FixedCosts,
        HostProbe,
        KernelRates,
        LastReply,
        MachineSpeed,
        PaceReading,
        RateAt,
        ReferenceDecode,
        ReferencePrefill,
        ReferenceRun,
        SpeedFactors,
        StepTiming,
        rate_at,
    )
    from vrampilot.speed.pace import measure_pace_ms
    from vrampilot.speed.report import format_probe, format_speed, probe_time_text, speed_to_dict
    from vrampilot.speed.service import (
        MeasuredMachine,
        add_missing_kernels,
        detect_measured_machine,
        kernels_missing,
        measure_devices_and_save,
        probe_machine,
        save_taken,
        take_probe,
        unmeasured_devices,
        with_devices_measured,
        with_measured_speed,
    )
    from vrampilot.speed.store import FILE_NAME as SPEED_FILE_NAME
    from vrampilot.speed.store import (
        load_machine_speed,
        machine_fingerprint,
        save_device_rates,
        save_probe,
        update_machine_speed,
    )

__all__ = [
    "ALL_WEIGHT_TYPES",
    "BUSY_SHARE",
    "CORE_WEIGHT_TYPES",
    "FACTOR_WINDOW",
    "LONG_ROW",
    "MODEL_FACTORS_KEPT",
    "PACES_KEPT",
    "PROBE_PACE_READINGS",
    "RATIO_MAX",
    "RATIO_MIN",
    "SHORTEST_ROW",
    "SHORT_ROW",
    "SLOW_PACE",
    "SPEED_FILE_NAME",
    "Acceptance",
    "AttentionRates",
    "CpuSnapshot",
    "DeviceRates",
    "ElementwiseRates",
    "FixedCosts",
    "HostProbe",
    "KernelRates",
    "LastReply",
    "MachineSpeed",
    "MeasuredMachine",
    "PaceReading",
    "ProbeCancelled",
    "RateAt",
    "ReferenceDecode",
    "ReferencePrefill",
    "ReferenceRun",
    "SpeedFactors",
    "StepTiming",
    "add_missing_kernels",
    "bits_per_weight",
    "cpu_snapshot",
    "decode_record",
    "detect_measured_machine",
    "encode_record",
    "format_probe",
    "format_speed",
    "ggml_type_id",
    "kernels_missing",
    "load_acceptance",
    "load_machine_speed",
    "machine_fingerprint",
    "measure_devices_and_save",
    "measure_pace_ms",
    "missing_kernels",
    "others_cpu_share",
    "p_from_rate",
    "pair_key",
    "probe_machine",
    "probe_outdated",
    "probe_time_text",
    "rate_at",
    "record_acceptance",
    "save_device_rates",
    "save_probe",
    "save_taken",
    "speed_to_dict",
    "stream_bytes",
    "take_probe",
    "unmeasured_devices",
    "update_machine_speed",
    "with_devices_measured",
    "with_measured_speed",
]

# Each module and the names of the API it holds ("api=name" where the API renames one).
_HOLDERS = {
    "acceptance": ("Acceptance", "load_acceptance", "p_from_rate", "pair_key", "record_acceptance=record_reply"),
    "codec": ("decode_record=decode", "encode_record=encode"),
    "cpu_load": ("BUSY_SHARE", "CpuSnapshot", "cpu_snapshot=snapshot", "others_cpu_share=others_share"),
    "host_probe": (
        "ALL_WEIGHT_TYPES",
        "CORE_WEIGHT_TYPES",
        "ProbeCancelled",
        "bits_per_weight",
        "ggml_type_id",
        "missing_kernels",
        "probe_outdated",
        "stream_bytes",
    ),
    "measured": (
        "AttentionRates",
        "DeviceRates",
        "ElementwiseRates",
        "FACTOR_WINDOW",
        "FixedCosts",
        "HostProbe",
        "KernelRates",
        "LONG_ROW",
        "LastReply",
        "MODEL_FACTORS_KEPT",
        "MachineSpeed",
        "PACES_KEPT",
        "PROBE_PACE_READINGS",
        "PaceReading",
        "RATIO_MAX",
        "RATIO_MIN",
        "RateAt",
        "ReferenceDecode",
        "ReferencePrefill",
        "ReferenceRun",
        "SHORTEST_ROW",
        "SHORT_ROW",
        "SLOW_PACE",
        "SpeedFactors",
        "StepTiming",
        "rate_at",
    ),
    "pace": ("measure_pace_ms",),
    "report": ("format_probe", "format_speed", "probe_time_text", "speed_to_dict"),
    "service": (
        "MeasuredMachine",
        "add_missing_kernels",
        "detect_measured_machine",
        "kernels_missing",
        "measure_devices_and_save",
        "probe_machine",
        "save_taken",
        "take_probe",
        "unmeasured_devices",
        "with_devices_measured",
        "with_measured_speed",
    ),
    "store": (
        "SPEED_FILE_NAME=FILE_NAME",
        "load_machine_speed",
        "machine_fingerprint",
        "save_device_rates",
        "save_probe",
        "update_machine_speed",
    ),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
