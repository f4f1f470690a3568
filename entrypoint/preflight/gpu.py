"""The GPU check: the driver against the image's CUDA build, and a real kernel on every card.

``torch.cuda.is_available()`` says True for a wheel with no kernels for this card and for a
driver older than the build; both fail later, after an hour of setup. This module finds out
in seconds. All it learns from the machine comes through a ``Probe``, so that every verdict
can be tested with the answers of machines we do not have.
"""

import ast
import ctypes
import importlib.util
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from entrypoint import __version__
from entrypoint.errors import ExitCode, TrainboxError

INDEX_URL = "https://download.pytorch.org/whl/{flavour}"
MAX_RELATIVE_ERROR = 1e-3
SIZE = 2000


@dataclass(frozen=True)
class Flavour:
    """One CUDA build of the image: its CUDA version and the GPU architectures it covers."""

    name: str
    cuda: tuple[int, int]
    archs: frozenset[int]


# The CUDA builds of torch 2.14 (docs/platforms.md: "Which image for which machine"), oldest first,
# with the architectures PyTorch compiles into each (.ci/manywheel/build_cuda.sh).
FLAVOURS = (
    Flavour("cu126", (12, 6), frozenset({50, 60, 70, 75, 80, 86, 90})),
    Flavour("cu130", (13, 0), frozenset({75, 80, 86, 90, 100, 120})),
    Flavour("cu132", (13, 2), frozenset({75, 80, 86, 90, 100, 120})),
)


def covers(compiled: set[int], sm: int) -> bool:
    """Kernels compiled for sm_XY run on any card of the same major version and minor >= Y."""
    return any(c // 10 == sm // 10 and c % 10 <= sm % 10 for c in compiled)


@dataclass(frozen=True)
class Device:
    name: str
    memory: int
    capability: tuple[int, int]


class Probe(Protocol):
    """What the check asks of the machine."""

    def driver(self) -> tuple[str | None, str | None]:
        """(driver version, highest CUDA version it supports), None where unknown."""

    def build(self) -> tuple[str, str | None, list[str]]:
        """torch's version, the CUDA version it was built for (None: CPU build), its archs."""

    def devices(self) -> list[Device]:
        """The GPUs this container sees."""

    def matmul(self, index: int) -> tuple[float, float]:
        """A 2000x2000 matmul on GPU ``index``: (max relative error against the CPU, seconds)."""


@dataclass
class GpuReport:
    index: int
    name: str
    memory_gb: float
    capability: str
    covered: bool
    kernel_seconds: float | None = None
    kernel_error: float | None = None


@dataclass
class GpuVerdict:
    torch: str
    torch_cuda: str | None
    driver: str | None
    driver_cuda: str | None
    gpus: list[GpuReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _version(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _image(flavour: Flavour) -> str:
    return (
        f"the image built with TORCH_INDEX_URL={INDEX_URL.format(flavour=flavour.name)} "
        f"(tag trainbox:{__version__}-{flavour.name})"
    )


def _fitting(driver_cuda: tuple[int, int] | None, archs: set[int]) -> Flavour | None:
    """The oldest build this driver can run (same CUDA major or older) with kernels for archs:
    the default image (cu126) where it fits, else -cu130 for a Blackwell card, as
    docs/platforms.md and the Blackwell templates say; cu132 is never needed."""
    for flavour in FLAVOURS:
        runs = driver_cuda is None or flavour.cuda[0] <= driver_cuda[0]
        if runs and all(covers(flavour.archs, sm) for sm in archs):
            return flavour
    return None


def _arch_names(archs: list[str]) -> set[int]:
    return {int(a.split("_")[1]) for a in archs if a.startswith("sm_") and a[3:].isdigit()}


def _fail(message: str) -> TrainboxError:
    return TrainboxError(message, ExitCode.PREFLIGHT)


def check(device: str, probe: Probe) -> GpuVerdict:
    """Check the GPUs that DEVICE selects; a failure raises one line that says what to do."""
    version, build_cuda, archs = probe.build()
    driver, driver_cuda = probe.driver() if device != "cpu" else (None, None)
    verdict = GpuVerdict(version, build_cuda, driver, driver_cuda)
    if device == "cpu":
        verdict.notes.append("DEVICE=cpu: GPU checks skipped, training runs on the CPU")
        return verdict
    devices = probe.devices()
    if build_cuda is None:
        raise _fail(
            "this image's torch is a CPU build and cannot use a GPU: use a CUDA image "
            f"(trainbox:{__version__}, or -cu130 on a Blackwell card), or set DEVICE=cpu"
        )
    if not devices:
        hint = "" if driver is None else " (the driver is there: check NVIDIA_VISIBLE_DEVICES)"
        raise _fail(
            "no GPU visible: run with --gpus all (compose: the GPU request in "
            f"compose.yaml), or set DEVICE=cpu to train on the CPU{hint}"
        )
    wanted = range(len(devices)) if device == "auto" else [int(i) for i in device.split(",")]
    if missing := [i for i in wanted if i >= len(devices)]:
        raise _fail(
            f"DEVICE={device}: GPU {missing[0]} does not exist, {len(devices)} visible "
            f"(0-{len(devices) - 1}): set DEVICE to visible indices, or auto"
        )
    needed = _version(build_cuda)
    have = _version(driver_cuda)
    capabilities = {devices[i].capability[0] * 10 + devices[i].capability[1] for i in wanted}
    if have and needed and have[0] < needed[0]:
        fit = _fitting(have, capabilities)
        instead = f"use {_image(fit)}, or " if fit else ""
        raise _fail(
            f"this image is built for CUDA {build_cuda}, the driver ({driver}) supports "
            f"up to {driver_cuda}: {instead}update the host's NVIDIA driver"
        )
    if have and needed and have < needed:
        verdict.notes.append(
            f"driver supports CUDA {driver_cuda}, the build {build_cuda}: runs "
            "through CUDA minor version compatibility (no PTX JIT)"
        )
    compiled = _arch_names(archs)
    for index in wanted:
        verdict.gpus.append(_check_one(index, devices[index], compiled, archs, have, probe))
    verdict.notes += notes_for(verdict.gpus)
    return verdict


def _check_one(
    index: int,
    dev: Device,
    compiled: set[int],
    archs: list[str],
    driver_cuda: tuple[int, int] | None,
    probe: Probe,
) -> GpuReport:
    sm = dev.capability[0] * 10 + dev.capability[1]
    report = GpuReport(
        index,
        dev.name,
        round(dev.memory / 2**30, 1),
        f"{dev.capability[0]}.{dev.capability[1]}",
        covers(compiled, sm),
    )
    try:
        error, seconds = probe.matmul(index)
    except RuntimeError as err:
        if "no kernel image" in str(err) or not report.covered:
            fit = _fitting(driver_cuda, {sm})
            instead = f"use {_image(fit)}" if fit else "this GPU is too old for every build"
            raise _fail(
                f"no kernel image for sm_{sm} ({dev.name}) in this build (it has "
                f"{', '.join(a for a in archs if a.startswith('sm_'))}): {instead}"
            ) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise _fail(
            f"GPU {index} ({dev.name}) failed a test kernel: {first}; the card or its "
            "driver is broken: rent another machine"
        ) from None
    if not error <= MAX_RELATIVE_ERROR:
        raise _fail(
            f"GPU {index} ({dev.name}) computed a wrong matmul (relative error "
            f"{error:.2g}): the card is faulty: rent another machine"
        )
    report.kernel_seconds, report.kernel_error = round(seconds, 4), error
    return report


def notes_for(reports: list[GpuReport]) -> list[str]:
    """Warnings about cards that passed only through PTX JIT (no compiled kernels for them)."""
    return [
        f"GPU {r.index} ({r.name}, sm {r.capability}) has no compiled kernels in this build: "
        "it runs through PTX JIT, slower to start"
        for r in reports
        if not r.covered
    ]


class TorchProbe:
    """The real machine: torch, and the driver's own libraries through ctypes (no nvidia-smi).
    ``cpu_only``: DEVICE=cpu, where only torch's version and CUDA build are reported: they are
    read from torch/version.py, without importing torch (2-4 s here, and the train program
    imports it anyway)."""

    def __init__(self, cpu_only: bool = False) -> None:
        self.cpu_only = cpu_only

    def driver(self) -> tuple[str | None, str | None]:
        version = cuda = None
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() == 0:
                buffer = ctypes.create_string_buffer(96)
                if nvml.nvmlSystemGetDriverVersion(buffer, 96) == 0:
                    version = buffer.value.decode()
                nvml.nvmlShutdown()
        except OSError:
            pass
        try:
            number = ctypes.c_int()
            if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(number)) == 0:
                cuda = f"{number.value // 1000}.{number.value % 1000 // 10}"
        except OSError:
            pass
        return version, cuda

    def build(self) -> tuple[str, str | None, list[str]]:
        if self.cpu_only and (written := _version_file()):
            return written[0], written[1], []
        import torch

        archs = torch.cuda.get_arch_list() if torch.version.cuda else []
        return torch.__version__, torch.version.cuda, archs

    def devices(self) -> list[Device]:
        import torch

        if not torch.version.cuda or not torch.cuda.is_available():
            return []
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        return [Device(p.name, p.total_memory, (p.major, p.minor)) for p in props]

    def matmul(self, index: int) -> tuple[float, float]:
        import torch

        generator = torch.Generator().manual_seed(0)
        a = torch.rand(SIZE, SIZE, generator=generator)
        expected = a @ a
        gpu = torch.device("cuda", index)
        (a.to(gpu) @ a.to(gpu)).sum().item()  # warm up: context and cuBLAS
        start = time.perf_counter()
        got = a.to(gpu) @ a.to(gpu)
        torch.cuda.synchronize(gpu)
        seconds = time.perf_counter() - start
        error = ((got.cpu() - expected).abs().max() / expected.abs().max()).item()
        return error, seconds


def _version_file() -> tuple[str, str | None] | None:
    """torch's ``__version__`` and ``cuda`` as its build wrote them in torch/version.py."""
    spec = importlib.util.find_spec("torch")
    if not spec or not spec.submodule_search_locations:
        return None
    values: dict[str, Any] = {}
    try:
        tree = ast.parse((Path(spec.submodule_search_locations[0]) / "version.py").read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            values[target.id] = node.value.value
    if not isinstance(values.get("__version__"), str):
        return None
    return values["__version__"], values.get("cuda")
