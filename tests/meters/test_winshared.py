"""The spill meter's Windows source, `GPU Process Memory` per process, read through pdh.dll at its
boundary (the double, testkit/fake_pdh.py, answers as PDH does): English counter paths, the
process's own instances summed over adapters, instances that appear later, PDH's "no data yet"
statuses, and a Windows without the counter set, each a reading or one line of reason."""

from __future__ import annotations

from testkit.fake_pdh import MIB, FakePdh, instance
from vrampilot.meters.types import SharedGpuMemory
from vrampilot.meters.winshared import (
    NO_COUNTERS,
    NOT_YET,
    PDH_CSTATUS_NO_INSTANCE,
    PDH_NO_DATA,
    PdhApi,
    SharedMemoryReader,
    open_shared_memory_reader,
)

PID = 1234
DESKTOP = {instance(4321): (64 * MIB, 300 * MIB), instance(12345): (9 * MIB, 9 * MIB)}  # dwm, pid 12345


def _reader(pdh: FakePdh) -> SharedMemoryReader:
    def make() -> PdhApi:
        return pdh

    return open_shared_memory_reader(PID, platform="win32", pdh=make)


def test_the_process_usage_summed_over_its_adapters_by_english_names() -> None:
    pdh = FakePdh(
        [
            DESKTOP,  # the model not loaded yet: no instance of this process
            {**DESKTOP, instance(PID): (100 * MIB, 6000 * MIB), instance(PID, 0xB3C4): (28 * MIB, 0)},
        ]
    )
    reader = _reader(pdh)
    # English names: pdh.dll translates them on a localised Windows ("GPU-Prozessspeicher").
    assert pdh.added == ["\\GPU Process Memory(*)\\Shared Usage", "\\GPU Process Memory(*)\\Dedicated Usage"]
    assert reader.read() is None and reader.reason == NOT_YET
    # The instances appear once the process touches the GPU: picked up without adding anything.
    assert reader.read() == SharedGpuMemory(shared_bytes=128 * MIB, dedicated_bytes=6000 * MIB)
    assert reader.reason is None and len(pdh.added) == 2
    reader.close()
    assert pdh.open_queries == 0


def test_pdh_statuses_for_no_data_yet_and_vanished_instances() -> None:
    for status in (PDH_NO_DATA, PDH_CSTATUS_NO_INSTANCE):
        reader = _reader(FakePdh([DESKTOP], errors={"formatted_array": status}))
        assert reader.read() is None and reader.reason == NOT_YET
    # An adapter instance that went away during the collection is left out, not read as 0 or garbage.
    gone = instance(PID, 0xB3C4)
    reader = _reader(FakePdh([{instance(PID): (5 * MIB, 7 * MIB), gone: (1, 1)}], invalid=frozenset({gone})))
    assert reader.read() == SharedGpuMemory(5 * MIB, 7 * MIB)


def test_a_windows_without_the_counters_or_a_failing_pdh_is_one_line() -> None:
    pdh = FakePdh(no_counter_set=True)
    reader = _reader(pdh)
    assert reader.read() is None and reader.reason == NO_COUNTERS
    assert pdh.open_queries == 0  # the query was closed again
    failing = _reader(FakePdh([DESKTOP], errors={"collect": 0xC0000BBC}))
    assert failing.read() is None
    assert failing.reason == "performance counters failed: collect failed (PDH status 0xC0000BBC)"


def test_the_real_reader_on_a_machine_without_pdh() -> None:
    # pdh.dll looked up for real on a machine that has none: a line, never an exception.
    reason = open_shared_memory_reader(PID, platform="win32").reason
    assert reason is not None and reason.startswith("performance counters not readable (")
