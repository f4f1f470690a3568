"""The GPUs' waiting, in dollars: each GPU's busy share and memory, sampled through NVML
(PyPI ``nvidia-ml-py``) by the watchdog every few seconds, off the training path, and summed
per epoch with the container's CPU time over it.

NVML's utilisation is the share of its last sample period (1/6 s to 1 s, by card) in which a
kernel ran; the mean of samples taken every ``watchdog.CHECK_SECONDS`` estimates an epoch's busy
share (a simplification: a sample is a glimpse, not the whole period). The CPU time
(``limits.cpu_seconds``) over the epoch, against the CPUs the container may use, tells which
lever helps: more WORKERS while the CPUs idle, else a cheaper card. Without NVML (no driver:
a CPU run) there are no figures, never made-up ones.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from entrypoint.state import cost

log = logging.getLogger("trainbox")

WAITING = 0.8  # an epoch whose GPUs were busy less than this share of it is said, once a run
CPUS_BUSY = 0.8  # CPUs busy more than this share: more workers would not load faster
KEPT = 20  # epochs the status keeps


class Sampler:
    """The GPUs NVML sees, read one sample at a time."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self.nvml, self.handles = nvml, handles

    @classmethod
    def open(cls, nvml: Any = None) -> "Sampler | None":
        """NVML's GPUs (``pynvml`` unless a stand-in is given); None without a driver or GPU."""
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:  # no library, no driver (NVMLError_LibraryNotFound), no GPU
            return None
        return cls(nvml, handles) if handles else None

    def sample(self) -> list[tuple[float, int]] | None:
        """Each GPU's busy share now and its memory in use (bytes); None when NVML fails."""
        nvml = self.nvml
        try:
            return [(nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100,
                     int(nvml.nvmlDeviceGetMemoryInfo(h).used)) for h in self.handles]  # fmt: skip
        except Exception:  # a card fallen off the bus: the figures stop, the run goes on
            return None

    def energy(self) -> float | None:
        """The GPUs' energy since the driver loaded, in joules (NVML counts millijoules, on
        Volta and later); None where a card does not count it."""
        try:
            return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles) / 1e3
        except Exception:  # an older card (NVMLError_NotSupported), or one gone
            return None


@dataclass
class Energy:
    """The training's energy across the run's starts: what earlier starts counted (the status's
    ``gpu_energy``, kept by a new start of the same run) plus this start's, from its first
    reading."""

    before: float = 0.0  # joules, earlier starts
    first: float | None = None  # this start's first reading

    def add(self, reading: float | None) -> float | None:
        """The run's joules so far, with this reading; None before a reading."""
        if reading is None:
            return None
        if self.first is None:
            self.first = reading
        return self.before + reading - self.first


@dataclass
class Epochs:
    """Samples, summed into one record per finished epoch."""

    cpus: int  # the CPUs the container may use
    done: int | None = None  # finished epochs when the current one began
    whole: bool = False  # the current epoch's start was seen (not the first epoch seen)
    began: tuple[float, float | None] = (0.0, None)  # (time, CPU seconds) then
    busy: list[list[float]] = field(default_factory=list)  # per GPU
    peak: list[int] = field(default_factory=list)  # per GPU, bytes

    def add(self, done: int, samples: list[tuple[float, int]] | None, now: float,
            cpu_seconds: float | None) -> dict[str, Any] | None:  # fmt: skip
        """One check's samples, with the epochs finished by then; the record of an epoch that
        has just finished, when its start was seen too (not the first epoch seen: training's
        start, or a resume's, is not an epoch's)."""
        record = None
        if done != self.done:
            if self.whole and done == (self.done or 0) + 1 and any(self.busy):
                record = self._record(done, now, cpu_seconds)
            self.whole = self.done is not None
            self.done, self.began, self.busy, self.peak = done, (now, cpu_seconds), [], []
        for index, (busy, used) in enumerate(samples or []):
            if index == len(self.busy):
                self.busy.append([])
                self.peak.append(0)
            self.busy[index].append(busy)
            self.peak[index] = max(self.peak[index], used)
        return record

    def _record(self, done: int, now: float, cpu_seconds: float | None) -> dict[str, Any]:
        shares = [sum(each) / len(each) for each in self.busy if each]
        record: dict[str, Any] = {
            "epoch": done,
            "seconds": round(now - self.began[0], 1),
            "busy": round(sum(shares) / len(shares), 3),
            "gpus": [
                {"busy": round(s, 3), "memory_peak_bytes": p}
                for s, p in zip(shares, self.peak, strict=False)
            ],
        }
        if cpu_seconds is not None and self.began[1] is not None and now - self.began[0] >= 1:
            used = (cpu_seconds - self.began[1]) / ((now - self.began[0]) * self.cpus)
            record["cpu_busy"] = round(min(1.0, max(0.0, used)), 3)
        return record


def waiting(record: dict[str, Any], per_hour: float | None, workers: int) -> str | None:
    """The line that says an epoch's GPUs waited, what it cost and the lever; None when they
    were busy enough."""
    if record["busy"] >= WAITING:
        return None
    idle = 1 - record["busy"]
    money = (f", ${cost.dollars(record['seconds'] * idle, per_hour):.3f} at ${per_hour:.2f}/h"
             if per_hour else "")  # fmt: skip
    cpus = record.get("cpu_busy")
    if cpus is not None and cpus >= CPUS_BUSY:
        lever = (  # the guide's arithmetic, as the profile's advice says it (``cost.ADVICE``)
            f"the CPUs were busy {cpus:.0%}: more WORKERS would not load faster; a faster card "
            f"buys nothing, and a cheaper card with at least {record['busy']:.0%} of this one's "
            "speed trains as fast"
        )
    else:
        seen = f"the CPUs were busy {cpus:.0%}" if cpus is not None else "the CPUs' use unknown"
        lever = f"{seen}: raise WORKERS (now {workers}) to load data faster"
    return (f"epoch {record['epoch']}: the GPUs were busy {record['busy']:.0%} of its "
            f"{record['seconds']:.0f} s and waited {record['seconds'] * idle:.0f} s{money}; "
            f"{lever}")  # fmt: skip
