"""The GPUs' busy share per epoch and the dollars of their waiting, with a stand-in NVML."""

from types import SimpleNamespace

import pytest

from entrypoint.runtime import utilisation


class StandInNVML:
    """pynvml's calls the sampler makes, with scripted readings per GPU. Simplified: pynvml's
    ``nvmlDeviceGetUtilizationRates`` returns a ``c_nvmlUtilization_t`` (``gpu``, ``memory``:
    percents) and ``nvmlDeviceGetMemoryInfo`` a ``c_nvmlMemory_t`` (``total``, ``free``, ``used``:
    bytes); these carry the fields the sampler reads. ``init_fails`` is pynvml's
    ``NVMLError_LibraryNotFound`` on a machine without the driver."""

    def __init__(self, busy: list[list[int]], used: list[list[int]], init_fails: bool = False):
        self.busy, self.used, self.init_fails, self.read = busy, used, init_fails, 0

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise OSError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.busy)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.busy[handle][self.read], memory=0)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        """Millijoules since the driver loaded: 1 kJ more at each sample read, per card."""
        return (1 + handle) * 10_000_000 + self.read * 1_000_000

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        value = self.used[handle][self.read]
        if handle == len(self.busy) - 1:
            self.read += 1  # the next sample
        return SimpleNamespace(total=80 << 30, free=(80 << 30) - value, used=value)


def test_no_driver_no_figures() -> None:
    assert utilisation.Sampler.open(StandInNVML([[0]], [[0]], init_fails=True)) is None
    assert utilisation.Sampler.open(StandInNVML([], [])) is None  # a driver, no GPU


def test_an_epochs_busy_share_memory_peak_and_cpu_use() -> None:
    """Two GPUs, sampled every 2 s: the first epoch seen has no record (training's start is
    in it); epoch 2 begins at t=2, ends by t=10, and its record is what the samples say."""
    nvml = StandInNVML(busy=[[90, 40, 50, 30, 20, 99], [80, 60, 50, 50, 40, 99]],
                       used=[[1, 5, 9, 7, 3, 1], [2, 2, 2, 2, 2, 2]])  # fmt: skip
    sampler = utilisation.Sampler.open(nvml)
    assert sampler is not None
    epochs = utilisation.Epochs(cpus=4)
    assert epochs.add(0, sampler.sample(), 0.0, 10.0) is None  # the first epoch: begun unseen
    assert epochs.add(1, sampler.sample(), 2.0, 11.0) is None  # epoch 2 begins: 1 CPU-s used
    for now in (4.0, 6.0, 8.0):
        assert epochs.add(1, sampler.sample(), now, 11.0 + now) is None
    record = epochs.add(2, sampler.sample(), 10.0, 22.0)
    # the samples of epoch 2: t=2,4,6,8: GPU 0 40,50,30,20 -> 0.35; GPU 1 60,50,50,40 -> 0.50
    assert record == {
        "epoch": 2, "seconds": 8.0, "busy": 0.425,
        "gpus": [{"busy": 0.35, "memory_peak_bytes": 9}, {"busy": 0.5, "memory_peak_bytes": 2}],
        "cpu_busy": round((22.0 - 11.0) / (8.0 * 4), 3),
    }  # fmt: skip


def test_a_failing_card_stops_the_figures_not_the_run() -> None:
    nvml = StandInNVML(busy=[[50]], used=[[1]])
    sampler = utilisation.Sampler.open(nvml)
    assert sampler is not None
    assert sampler.sample() == [(0.5, 1)]
    assert sampler.sample() is None  # past the script: IndexError, as an NVMLError would be


RECORD = {"epoch": 3, "seconds": 100.0, "busy": 0.4, "gpus": [], "cpu_busy": 0.3}


def test_the_waiting_in_dollars_and_the_lever() -> None:
    line = utilisation.waiting(RECORD, 3.60, workers=2)
    # 60 s of 100 waited, at $3.60/h = $0.001/s: $0.060
    assert line == (
        "epoch 3: the GPUs were busy 40% of its 100 s and waited 60 s, $0.060 at $3.60/h; the "
        "CPUs were busy 30%: raise WORKERS (now 2) to load data faster"
    )
    busy_cpus = utilisation.waiting({**RECORD, "cpu_busy": 0.95}, None, workers=8)
    assert busy_cpus == ("epoch 3: the GPUs were busy 40% of its 100 s and waited 60 s; the "
                         "CPUs were busy 95%: more WORKERS would not load faster; a faster card "
                         "buys nothing, and a cheaper card with at least 40% of this one's speed "
                         "trains as fast")  # fmt: skip


@pytest.mark.parametrize("busy", [0.8, 0.97])
def test_a_busy_card_says_nothing(busy: float) -> None:
    assert utilisation.waiting({**RECORD, "busy": busy}, 3.6, workers=2) is None


def test_the_energy_adds_up_across_a_runs_starts() -> None:
    sampler = utilisation.Sampler.open(StandInNVML([[1, 1, 1]] * 2, [[0, 0, 0]] * 2))
    assert sampler is not None
    energy = utilisation.Energy(before=500.0)  # what earlier starts counted
    first = sampler.energy()  # 10 kJ + 20 kJ since the driver loaded: not this run's
    assert first == 30_000.0 and energy.add(first) == 500.0
    sampler.sample()  # the next read: each card 1 kJ more
    assert energy.add(sampler.energy()) == 2_500.0
    assert energy.add(None) is None
