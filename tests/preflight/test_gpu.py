"""Every preflight verdict and failure line, with the driver's and torch's answers injected at
the module's one boundary (``gpu.Probe``): no wrong GPU or old driver exists on this machine."""

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.preflight import check as preflight
from entrypoint.preflight import gpu
from tests.conftest import REPO, settings

CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
H200 = gpu.Device("NVIDIA H200", 150_000_000_000, (9, 0))
GTX1080 = gpu.Device("NVIDIA GeForce GTX 1080", 8_000_000_000, (6, 1))


@dataclass
class FakeProbe:
    """A machine described by its answers; ``kernel`` is an error to raise, or the error value."""

    driver_answer: tuple = ("580.65.06", "13.0")
    build_answer: tuple = ("2.14.1+cu130", "13.0", CU130_ARCHS)
    cards: list = field(default_factory=lambda: [H200])
    kernel: object = 1e-7
    ran: list = field(default_factory=list)

    def driver(self):
        return self.driver_answer

    def build(self):
        return self.build_answer

    def devices(self):
        return self.cards

    def matmul(self, index):
        self.ran.append(index)
        if isinstance(self.kernel, Exception):
            raise self.kernel
        return self.kernel, 0.0012


def failure(device: str, probe: FakeProbe) -> str:
    with pytest.raises(TrainboxError) as caught:
        gpu.check(device, probe)
    assert caught.value.code == ExitCode.PREFLIGHT
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_healthy_gpu_passes_with_its_kernel_time() -> None:
    verdict = gpu.check("auto", FakeProbe())
    [card] = verdict.gpus
    assert (card.name, card.capability, card.covered) == ("NVIDIA H200", "9.0", True)
    assert card.kernel_seconds == 0.0012 and card.memory_gb == 139.7
    assert (verdict.torch_cuda, verdict.driver, verdict.driver_cuda) == (
        "13.0",
        "580.65.06",
        "13.0",
    )
    assert verdict.notes == []


def test_device_cpu_skips_the_gpu_with_a_note() -> None:
    probe = FakeProbe(cards=[], driver_answer=(None, None))
    verdict = gpu.check("cpu", probe)
    assert verdict.gpus == [] and probe.ran == []
    assert verdict.notes == ["DEVICE=cpu: GPU checks skipped, training runs on the CPU"]


def test_auto_with_no_gpu_is_an_error_never_a_silent_cpu_run() -> None:
    message = failure("auto", FakeProbe(cards=[], driver_answer=(None, None)))
    assert message == (
        "no GPU visible: run with --gpus all (compose: the GPU request in "
        "compose.yaml), or set DEVICE=cpu to train on the CPU"
    )


def test_no_gpu_although_the_driver_is_there() -> None:
    assert "the driver is there: check NVIDIA_VISIBLE_DEVICES" in failure(
        "auto", FakeProbe(cards=[])
    )


def test_a_cpu_build_cannot_use_the_gpu() -> None:
    message = failure("0", FakeProbe(build_answer=("2.14.1+cpu", None, [])))
    assert message.startswith("this image's torch is a CPU build") and "DEVICE=cpu" in message


def test_a_driver_older_than_the_build_names_the_image_that_fits() -> None:
    message = failure("auto", FakeProbe(driver_answer=("550.54.15", "12.4")))
    assert message == (
        "this image is built for CUDA 13.0, the driver (550.54.15) supports up to 12.4: use the "
        "image built with TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 (tag "
        "trainbox:0.1.0-cu126), or update the host's NVIDIA driver"
    )


def test_a_driver_too_old_for_every_build_says_update_it() -> None:
    message = failure("auto", FakeProbe(driver_answer=("470.1", "11.4")))
    assert message.endswith("supports up to 11.4: update the host's NVIDIA driver")


def test_an_older_minor_version_runs_with_a_note() -> None:
    probe = FakeProbe(
        driver_answer=("560.1", "12.6"), build_answer=("2.14.1+cu128", "12.8", ["sm_75", "sm_90"])
    )
    verdict = gpu.check("auto", probe)
    assert verdict.notes == [
        "driver supports CUDA 12.6, the build 12.8: runs through CUDA minor "
        "version compatibility (no PTX JIT)"
    ]


def test_no_kernel_image_for_this_arch_names_the_build_that_has_it() -> None:
    probe = FakeProbe(
        cards=[GTX1080],
        kernel=RuntimeError(
            "CUDA error: no kernel image is available for execution on the device\nCUDA kernel "
            "errors might be asynchronously reported"
        ),
    )
    message = failure("auto", probe)
    assert message.startswith(
        "no kernel image for sm_61 (NVIDIA GeForce GTX 1080) in this build (it has sm_75, sm_80"
    )
    assert message.endswith(
        "use the image built with TORCH_INDEX_URL="
        "https://download.pytorch.org/whl/cu126 (tag trainbox:0.1.0-cu126)"
    )


def test_a_gpu_older_than_every_build() -> None:
    old = gpu.Device("Tesla K80", 12_000_000_000, (3, 7))
    message = failure("auto", FakeProbe(cards=[old], kernel=RuntimeError("no kernel image")))
    assert message.endswith("this GPU is too old for every build")


def test_kernels_for_an_older_minor_version_cover_the_card() -> None:
    l4 = gpu.Device("NVIDIA L4", 24_000_000_000, (8, 9))  # runs the sm_86 kernels
    b300 = gpu.Device("NVIDIA B300", 280_000_000_000, (10, 3))  # runs the sm_100 kernels
    verdict = gpu.check("auto", FakeProbe(cards=[l4, b300]))
    assert [card.covered for card in verdict.gpus] == [True, True]
    assert verdict.notes == []


def test_a_card_without_compiled_kernels_that_runs_by_ptx_gets_a_note() -> None:
    verdict = gpu.check("auto", FakeProbe(cards=[GTX1080]))
    assert verdict.gpus[0].covered is False
    assert "runs through PTX JIT" in verdict.notes[0]


def test_a_failing_kernel_and_a_wrong_result_say_rent_another_machine() -> None:
    broken = failure("auto", FakeProbe(kernel=RuntimeError("CUDA error: an illegal memory access")))
    assert broken == (
        "GPU 0 (NVIDIA H200) failed a test kernel: CUDA error: an illegal memory "
        "access; the card or its driver is broken: rent another machine"
    )
    wrong = failure("auto", FakeProbe(kernel=0.5))
    assert "computed a wrong matmul (relative error 0.5)" in wrong
    assert "relative error nan" in failure("auto", FakeProbe(kernel=float("nan")))


def test_device_indices_select_and_are_checked() -> None:
    probe = FakeProbe(cards=[H200, H200, H200])
    assert [card.index for card in gpu.check("0,2", probe).gpus] == [0, 2]
    assert probe.ran == [0, 2]
    assert failure("3", probe) == (
        "DEVICE=3: GPU 3 does not exist, 3 visible (0-2): set DEVICE to visible indices, or auto"
    )


ROOMY = preflight.System(shm=8 << 30, cpus=16, free=100 << 30)


def test_small_shm_lowers_the_workers_or_stops_as_the_setting_says() -> None:
    small = replace(ROOMY, shm=64 << 20)
    workers, notes = preflight.fit_workers(4, "lower", 1, small)
    assert workers == 0
    assert notes == [
        "/dev/shm is 64 MB: WORKERS lowered from 4 to 0 (SHM_POLICY=lower); run "
        "with --shm-size 16g (compose: shm_size) or --ipc host to load data faster"
    ]
    with pytest.raises(TrainboxError) as caught:
        preflight.fit_workers(4, "stop", 1, small)
    assert str(caught.value) == (
        "/dev/shm is 64 MB, too small for WORKERS=4 dataloader workers: run with --shm-size 16g "
        "(compose: shm_size) or --ipc host, or set WORKERS=0"
    )
    assert preflight.fit_workers(4, "lower", 1, ROOMY) == (4, [])
    assert preflight.fit_workers(0, "lower", 1, small) == (0, [])


@pytest.mark.parametrize(
    ("asked", "cpus", "procs", "workers", "note"),
    [
        ("auto", 16, 1, 8, None),  # at most 8
        ("auto", 6, 1, 6, None),
        ("auto", 16, 4, 4, None),  # shared among the GPUs' processes
        ("auto", 1, 1, 1, None),
        ("auto", 2, 4, 1, None),  # at least 1
        (4, 1, 1, 1, "WORKERS=4 lowered to 1: the container may use 1 CPU"),
        (
            8,
            12,
            4,
            3,
            "WORKERS=8 lowered to 3: the container may use 12 CPUs, 3 for each of 4 training "
            "processes",
        ),
        (3, 12, 4, 3, None),
        (0, 1, 1, 0, None),
    ],
)
def test_workers_fit_the_cpus(asked, cpus: int, procs: int, workers: int, note) -> None:
    assert preflight.fit_cpus(asked, cpus, procs) == (workers, note)
    fitted = preflight.fit_workers(asked, "lower", procs, replace(ROOMY, cpus=cpus))
    assert fitted == (workers, [note] if note else [])


def test_an_unwritable_volume_stops(tmp_path: Path) -> None:
    with pytest.raises(TrainboxError, match="is not writable \\(Read-only file system\\): mount"):
        preflight.check(
            settings(tmp_path), FakeProbe(), replace(ROOMY, unwritable="Read-only file system")
        )


def test_the_verdict_is_written_pass_or_fail(tmp_path: Path) -> None:
    result = preflight.run(settings(tmp_path, DEVICE="auto"), FakeProbe())
    assert preflight.read(settings(tmp_path).workspace) == result
    assert result["ok"] and result["gpus"][0]["kernel_seconds"] == 0.0012
    with pytest.raises(TrainboxError):
        preflight.run(
            settings(tmp_path, DEVICE="auto"), FakeProbe(cards=[], driver_answer=(None, None))
        )
    written = preflight.read(settings(tmp_path).workspace)
    assert written["ok"] is False and written["exit_code"] == ExitCode.PREFLIGHT
    assert written["error"].startswith("no GPU visible")


def test_more_processes_than_selected_gpus_stops_before_training(tmp_path: Path) -> None:
    """Seen on a real H200: NPROC_PER_NODE=2 with one card started torchrun, and rank 1 died
    after ~30 s with "device_id cuda:1 is out of range". The preflight says it at once."""
    two = FakeProbe(cards=[H200, H200])
    with pytest.raises(TrainboxError) as caught:
        preflight.check(settings(tmp_path, DEVICE="0", NPROC_PER_NODE="2"), two, ROOMY)
    assert caught.value.code == ExitCode.PREFLIGHT
    assert str(caught.value) == (
        "NPROC_PER_NODE=2: more training processes than the 1 GPU(s) DEVICE=0 selects, and "
        "each needs a card of its own: set NPROC_PER_NODE=0 (one per GPU) or at most 1"
    )
    both = preflight.check(settings(tmp_path, DEVICE="auto", NPROC_PER_NODE="2"), two, ROOMY)
    assert [card["index"] for card in both["gpus"]] == [0, 1]
    # On the CPU, processes are not cards: two local ranks are fine (issue #8's CPU test).
    assert (
        preflight.check(settings(tmp_path, DEVICE="cpu", NPROC_PER_NODE="2"), two, ROOMY)["gpus"]
        == []
    )


def test_on_the_cpu_the_probe_reads_torchs_build_without_importing_it() -> None:
    """DEVICE=cpu reports torch's version and CUDA build from torch/version.py: the same
    answer as torch's own, and no 2-4 s import of torch in the preflight's process."""
    import subprocess
    import sys

    probe = (
        "import json, sys\nfrom entrypoint.preflight import gpu\n"
        "build = gpu.TorchProbe(cpu_only=True).build()\n"
        "print(json.dumps([build, 'torch' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    (version, cuda, archs), imported = json.loads(done.stdout)
    import torch

    assert (version, cuda, archs, imported) == (torch.__version__, torch.version.cuda, [], False)


B200 = gpu.Device("NVIDIA B200", 180_000_000_000, (10, 0))
RTX5090 = gpu.Device("NVIDIA GeForce RTX 5090", 32_000_000_000, (12, 0))
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
NO_KERNEL = RuntimeError("CUDA error: no kernel image is available for execution on the device")


@pytest.mark.parametrize(
    ("card", "driver", "tag"),
    [
        (B200, ("580.65.06", "13.0"), "-cu130"),
        (RTX5090, ("590.1", "13.2"), "-cu130"),  # the Blackwell templates' image, not -cu132
        (GTX1080, ("580.65.06", "13.0"), "-cu126"),
    ],
    ids=["b200-cuda13.0", "rtx5090-cuda13.2", "gtx1080-cuda13.0"],
)
def test_the_tag_advised_for_a_card_without_kernels_is_the_one_the_docs_name(
    card: gpu.Device, driver: tuple[str, str], tag: str
) -> None:
    """On the default image (cu126): the fix names the flavour docs/platforms.md and the
    templates give for that card and driver."""
    probe = FakeProbe(driver_answer=driver, build_answer=("2.14.1+cu126", "12.6", CU126_ARCHS),
                      cards=[card], kernel=NO_KERNEL)  # fmt: skip
    assert failure("auto", probe).endswith(f"(tag trainbox:0.1.0{tag})")
    platforms = (REPO / "docs" / "platforms.md").read_text()
    if card is not GTX1080:
        assert f"with the `{tag}` image, only on Blackwell cards" in platforms
