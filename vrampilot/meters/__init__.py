"""Live meters: VRAM by component against the plan, achieved memory bandwidth, spill, RAM and CPU.

Qt-free. `sampler.Sampler` reads the hardware on its own thread; `state.MeterState` combines its
samples with the plan and the engine's measured decode speeds into a `MeterReadout` that the panel,
the status bar and the tests read (`bandwidth` and `spill` hold the arithmetic). `vrampilot monitor`
(cli.py) prints the raw samples. This file imports only the sampler side, so the monitor command
starts without loading the planner.
"""

from vrampilot.meters.sampler import Sampler
from vrampilot.meters.types import HostSample, MeterSample, SharedGpuMemory

__all__ = ["HostSample", "MeterSample", "Sampler", "SharedGpuMemory"]
