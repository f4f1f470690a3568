"""Before renting, and when to stop paying: the arithmetic of the disk and of stopping.

The disk of a rented machine is chosen before it starts and cannot shrink; a stopped one
still bills its disk, and a stopped one holds no GPU. ``trainbox plan`` does the sums and
shows them.
"""

import math
from typing import Any

from entrypoint.gateways.hub import XET_LOGS, XET_SHARD_CACHE

GB = 1e9
MARGIN = 1.30
# A libreyolo checkpoint holds the model's weights, their training copy, their EMA and the
# optimizer's state: LibreYOLO9t's 8.2 MB of weights gave 35.3 MB checkpoints (libreyolo 1.6.0).
CHECKPOINT_FACTOR = 4.3
# The seed guide writes "/ 730", but its own measured $0.0694 per hour for 250 GB at $0.20 per
# GB-month is 50 / 720: the provider bills a 30-day month. 730 would give $0.0685.
HOURS_PER_MONTH = 720


def checkpoint_bytes(model: str) -> int:
    """A training checkpoint's size for ``model``, from its architecture built on the CPU."""
    from entrypoint.training.weights import architecture

    network = architecture(model)
    net = getattr(network, "model", network)
    weights = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    return int(weights * CHECKPOINT_FACTOR)


def disk(
    tar_name: str,
    tar_bytes: int,
    checkpoint: int,
    epochs: int,
    save_period: int,
    tars: int = 1,
    *,
    start_weights: int = 0,
    teacher: int = 0,
    exports: int = 0,
) -> tuple[list[str], int]:
    """The lines that show the sum, and the whole GB to allocate: everything a run writes on
    the volume. ``tars``: how many tars ``tar_name`` stands for (a shard index's shards);
    ``start_weights``, ``teacher``: their files' bytes; ``exports``: how many EXPORT formats."""
    snapshots = epochs // save_period if save_period else 0
    kept = 2 + snapshots
    checkpoints = kept * checkpoint * 2
    model = checkpoint / CHECKPOINT_FACTOR  # an export holds the weights once
    exported = exports * model * 2
    parts = [tar_bytes, tar_bytes, checkpoints, start_weights, teacher, exported]
    subtotal = sum(parts) + XET_SHARD_CACHE + XET_LOGS
    total = subtotal * MARGIN
    allocate = math.ceil(total / GB)
    lines = [
        f"dataset      {tar_name}: {tar_bytes / GB:.3f} GB"
        + (f" in {tars} shards" if tars > 1 else "")
        + f", extracted as it streams (no tar is stored): {tar_bytes / GB:.3f} GB",
        f"new commit   {tar_bytes / GB:.3f} GB: a new commit of the dataset stages beside the "
        "old copy, which goes once the new one is complete",
        f"checkpoints  {checkpoint / GB:.3f} GB each x {kept} (best, last, {snapshots} "
        f"snapshot(s): {epochs} epochs / SAVE_PERIOD {save_period}) x 2 (weights/ and "
        f"its published copy) = {checkpoints / GB:.3f} GB",
        f"start        {start_weights / GB:.3f} GB (MODEL's weights, fetched once)",
        f"teacher      {teacher / GB:.3f} GB (distill_model's files)",
        f"exports      {exports} format(s) x {model / GB:.3f} GB (the weights) x 2 (export/ "
        f"and its published copy) = {exported / GB:.3f} GB",
        f"xet cache    at most {(XET_SHARD_CACHE + XET_LOGS) / GB:.3f} GB (HF_HOME/xet: the "
        "upload's chunk indexes and logs, capped)",
        f"subtotal     {subtotal / GB:.3f} GB",
        f"margin       x {MARGIN:.2f} = {total / GB:.3f} GB",
        f"allocate     {allocate} GB",
    ]
    return lines, allocate


def start_bytes(cfg: Any) -> int:
    """The start weights' bytes, as the Hub (or the path) says: no download; 0 from scratch."""
    from entrypoint.training import weights

    return _size(cfg, weights.source(cfg))


def teacher_bytes(cfg: Any) -> int:
    """A distillation teacher's bytes (all its files), as the Hub says; 0 without one."""
    from entrypoint.training import weights

    return sum(_size(cfg, each) for each in weights.teacher(cfg))


def _size(cfg: Any, found: Any) -> int:
    from entrypoint.gateways import hub

    if found is None:
        return 0
    if found.target is None:
        return found.path.stat().st_size if found.path and found.path.is_file() else 0
    return hub.remote_file(found.target, wait=cfg.hub_wait).size


def stop(
    disk_gb: float,
    storage_price: float,
    running_price: float,
    rebuild_cost: float,
    gap: float | None = None,
    hours_per_month: float = HOURS_PER_MONTH,
) -> list[str]:
    """Stopped against running against destroying and rebuilding, for a gap of ``gap`` hours."""
    stopped = disk_gb * storage_price / hours_per_month
    saving = running_price - stopped
    even = rebuild_cost / stopped if stopped else math.inf
    lines = [
        f"stopped      {disk_gb:g} GB x ${storage_price:.2f} per GB-month / {hours_per_month:g} h "
        f"= ${stopped:.4f} per hour (the disk only)",
        f"running      ${running_price:.4f} per hour: stopped costs ${saving:.4f} per hour less "
        f"({100 * saving / running_price:.0f}% less)",
        f"break-even   a ${rebuild_cost:.2f} rebuild = {even:.1f} h stopped: stopping wins for "
        f"gaps under {even:.1f} h, destroying and rebuilding for longer ones",
    ]
    if gap is not None:
        waiting = gap * stopped
        choice = "stop" if waiting < rebuild_cost else "destroy, then rebuild"
        lines.append(
            f"for {gap:g} h     {choice}: ${waiting:.2f} stopped against a "
            f"${rebuild_cost:.2f} rebuild"
        )
    lines.append(
        "warning      stopping releases the GPUs: nothing reserves them, and another renter "
        "may take them before you start again"
    )
    return lines
