"""A test double at the PDH boundary (Windows' performance counters, which Wine lacks for GPUs).

It stands where `vrampilot.meters.winshared.CtypesPdh` stands and answers as pdh.dll does: a query
handle, counter handles for the English paths it was given, and at each `collect()` the next
moment of a script of `GPU Process Memory` instances, returned by `formatted_array` as PDH's
items (instance name, the item's CStatus, the value). Failures carry PDH's own status codes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vrampilot.meters.winshared import (
    DEDICATED,
    PDH_CSTATUS_NO_OBJECT,
    PDH_CSTATUS_VALID_DATA,
    SHARED,
    PdhError,
)

MIB = 1024**2

# One moment: instance name -> (Shared Usage, Dedicated Usage) in bytes.
Moment = Mapping[str, tuple[int, int]]


def instance(pid: int, luid_low: int = 0xD1A2, phys: int = 0) -> str:
    return f"pid_{pid}_luid_0x00000000_0x{luid_low:08X}_phys_{phys}"


@dataclass
class FakePdh:
    moments: Sequence[Moment] = ({},)
    no_counter_set: bool = False  # Windows before 10 1709: the object does not exist
    errors: Mapping[str, int] = field(default_factory=dict)  # call name -> PDH status it fails with
    invalid: frozenset[str] = frozenset()  # instances whose items carry a status other than valid data
    added: list[str] = field(default_factory=list)
    collects: int = 0
    open_queries: int = 0

    def _fail(self, call: str) -> None:
        if call in self.errors:
            raise PdhError(call, self.errors[call])

    def open_query(self) -> int:
        self._fail("open_query")
        self.open_queries += 1
        return 0x1000

    def add_english_counter(self, query: int, path: str) -> int:
        self._fail("add_english_counter")
        if self.no_counter_set:
            raise PdhError("PdhAddEnglishCounterW", PDH_CSTATUS_NO_OBJECT)
        self.added.append(path)
        return 0x2000 + len(self.added)

    def collect(self, query: int) -> None:
        self._fail("collect")
        self.collects += 1

    def formatted_array(self, counter: int) -> Sequence[tuple[str, int, int]]:
        self._fail("formatted_array")
        moment = self.moments[min(max(self.collects - 1, 0), len(self.moments) - 1)]
        which = 0 if self.added[counter - 0x2001].endswith(SHARED) else 1
        assert self.added[counter - 0x2001].endswith((SHARED, DEDICATED))
        return [
            (name, 0xC0000BC6 if name in self.invalid else PDH_CSTATUS_VALID_DATA, values[which])
            for name, values in moment.items()
        ]

    def close_query(self, query: int) -> None:
        self.open_queries -= 1
