"""Is this machine any good for training? The GPU path of trainbox, on a real card, in one command.

    python3 tests/gpu/acceptance.py --out result.json        # on a rented box, from a checkout
    python3 tests/gpu/acceptance.py --dry-run --out dry.json # no card: what can run without one

It needs nothing but a ``python3`` that has torch: no trainbox install, no network, no Docker.
Three steps, each reported as one line and in the JSON written to ``--out``:

1. ``preflight``: trainbox's own GPU check (``entrypoint/preflight/gpu.py`` with its real probe: the
   driver through NVML and ``cuDriverGetVersion``, torch's build, a checked matmul per card).
2. ``loop``: a small conv net trained for ``--steps`` steps under AMP (bf16 where the card has
   it, else fp16 with a gradient scaler), in steps per second; the loss must fall.
3. ``libreyolo``: one epoch of LibreYOLO9t, from scratch, on trainbox's built-in demo data, when
   ``libreyolo`` is importable; otherwise the step says so and counts as skipped.

It exits 0 only when every step passed (or was skipped), 1 otherwise. With ``--dry-run`` the
steps run on the CPU, and the preflight must give the no-GPU verdict a card-less machine gets:
CI runs it that way, so the script cannot rot while no GPU is at hand.
"""

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(
    0, str(ROOT)
)  # entrypoint/preflight/gpu.py and demo.py, without installing trainbox

from entrypoint.errors import TrainboxError  # noqa: E402
from entrypoint.preflight import gpu  # noqa: E402  (stdlib only at import)

NO_GPU = "no GPU visible"  # the start of the verdict a machine without a card must get


def preflight(dry_run: bool) -> dict[str, Any]:
    """trainbox's GPU check with the real probe; the verdict and its fix line."""
    probe = gpu.TorchProbe()
    driver, driver_cuda = probe.driver()
    torch_version, torch_cuda, archs = probe.build()
    result: dict[str, Any] = {
        "driver": driver,
        "driver_cuda": driver_cuda,
        "torch": torch_version,
        "torch_cuda": torch_cuda,
        "archs": archs,
    }
    try:
        verdict = gpu.check("auto", probe)
    except TrainboxError as err:
        result |= {"verdict": "fail", "fix": str(err), "exit_code": int(err.code)}
        # Without a card, the no-GPU line is the right answer, and the dry run wants it.
        result["passed"] = dry_run and str(err).startswith(NO_GPU)
        return result
    result |= {"verdict": "pass", "gpus": [vars(r) for r in verdict.gpus], "notes": verdict.notes}
    result["passed"] = not dry_run  # a dry run that found a card is not a dry run
    return result


def _net(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.SiLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.BatchNorm2d(64),
        nn.SiLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1),
        nn.BatchNorm2d(128),
        nn.SiLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


def loop(dry_run: bool, steps: int) -> dict[str, Any]:
    """A training-like loop under AMP: steps per second, and a loss that falls."""
    import torch

    device = torch.device("cpu" if dry_run else "cuda", 0)
    bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float16
    batch, size = (8, 32) if dry_run else (64, 128)
    torch.manual_seed(0)
    net = _net(torch).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=not bf16)
    images = torch.randn(batch, 3, size, size, device=device)
    images = images.to(memory_format=torch.channels_last)
    targets = torch.randint(0, 10, (batch,), device=device)
    losses = []

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(net(images), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())

    warmup = min(20, steps)
    for _ in range(warmup):
        step()
    _sync(torch, device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(torch, device)
    seconds = time.perf_counter() - start
    first, last = (float(losses[i]) for i in (0, -1))
    falls = last < first and all(map(torch.isfinite, (losses[0], losses[-1])))
    return {
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "image_size": size,
        "steps": steps,
        "seconds": round(seconds, 3),
        "steps_per_second": round(steps / seconds, 1),
        "loss_first": round(first, 4),
        "loss_last": round(last, 4),
        "passed": falls,
    }


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def libreyolo(dry_run: bool) -> dict[str, Any]:
    """One epoch of LibreYOLO9t from scratch on the built-in demo data, if libreyolo is here."""
    try:
        import libreyolo as _
    except ImportError as err:
        return {"skipped": f"libreyolo is not importable here ({err}); step skipped"}
    from libreyolo.cli.config import detect_family_from_model_ref, get_model_class

    from entrypoint.dataset import demo

    device = "cpu" if dry_run else "0"
    with tempfile.TemporaryDirectory(prefix="trainbox-acceptance-") as tmp:
        data_yaml, _ = demo.ensure(Path(tmp) / "demo")
        # The registry `trainbox train` (entrypoint/training/program.py) builds the model with.
        model_cls = get_model_class(detect_family_from_model_ref("LibreYOLO9t.pt"))
        model = model_cls(None, size="t", device="cpu" if dry_run else "cuda")
        start = time.perf_counter()
        model.train(
            data=str(data_yaml),
            epochs=1,
            batch=8,
            imgsz=128,
            workers=0,
            device=device,
            project=tmp,
            name="run",
            exist_ok=True,
            **({"sync_bn": False} if dry_run else {}),
        )
        seconds = time.perf_counter() - start
        weights = sorted(p.name for p in (Path(tmp) / "run" / "weights").glob("*.pt"))
    return {
        "model": "LibreYOLO9t",
        "device": device,
        "epoch_seconds": round(seconds, 2),
        "weights": weights,
        "passed": "last.pt" in weights,
    }


def _run(step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return step()
    except Exception as err:  # one failing step must not hide the others' figures
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return {
            "passed": False,
            "error": f"{type(err).__name__}: {first}",
            "traceback": traceback.format_exc(limit=6),
        }


def summary(name: str, result: dict[str, Any]) -> str:
    """One line for a step."""
    if "skipped" in result:
        return f"{name}: skipped: {result['skipped']}"
    state = "ok" if result.get("passed") else "FAILED"
    if "error" in result:
        return f"{name}: {state}: {result['error']}"
    if name == "preflight":
        head = (
            f"driver {result['driver']} (CUDA <= {result['driver_cuda']}), "
            f"torch {result['torch']} (CUDA {result['torch_cuda']})"
        )
        if result["verdict"] == "fail":
            return f"{name}: {state}: {head}: verdict fail: {result['fix']}"
        cards = "; ".join(
            f"GPU {g['index']} {g['name']} {g['memory_gb']} GiB sm {g['capability']} "
            f"{'compiled' if g['covered'] else 'PTX only'}, matmul {g['kernel_seconds']} s "
            f"(error {g['kernel_error']:.1e})"
            for g in result["gpus"]
        )
        return f"{name}: {state}: {head}: {cards}: verdict pass"
    if name == "loop":
        return (
            f"{name}: {state}: {result['steps_per_second']} steps/s on {result['device']} "
            f"({result['dtype']}, batch {result['batch']}, {result['image_size']} px), "
            f"loss {result['loss_first']} -> {result['loss_last']}"
        )
    return (
        f"{name}: {state}: 1 epoch of {result['model']} on {result['device']} in "
        f"{result['epoch_seconds']} s, weights {', '.join(result['weights']) or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    parser.add_argument("--dry-run", action="store_true", help="no card: run on the CPU")
    parser.add_argument("--steps", type=int, default=0, help="loop steps [300; dry run 10]")
    parser.add_argument("--no-libreyolo", action="store_true", help="skip the LibreYOLO epoch")
    args = parser.parse_args(argv)
    steps = args.steps or (10 if args.dry_run else 300)
    report: dict[str, Any] = {
        "dry_run": args.dry_run,
        "python": platform.python_version(),
        "machine": platform.node(),
    }
    steps_run: dict[str, Callable[[], dict[str, Any]]] = {
        "preflight": lambda: preflight(args.dry_run),
        "loop": lambda: loop(args.dry_run, steps),
        "libreyolo": (
            (lambda: {"skipped": "--no-libreyolo"})
            if args.no_libreyolo
            else (lambda: libreyolo(args.dry_run))
        ),
    }
    for name, step in steps_run.items():
        report[name] = _run(step)
        print(summary(name, report[name]), flush=True)
    passed = all(r.get("passed") or "skipped" in r for r in (report[n] for n in steps_run))
    report["passed"] = passed
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"acceptance: {'passed' if passed else 'FAILED'} (JSON in {args.out})", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
