"""Before renting, and when to stop paying: the arithmetic of the disk and of stopping.

The disk of a rented machine is chosen before it starts and cannot shrink; a stopped one
still bills its disk, and a stopped one holds no GPU. ``trainbox plan`` does the sums and
shows them.
"""

import math
from typing import Any

from entrypoint.gateways.hub import XET_LOGS, XET_SHARD_CACHE
from entrypoint.state.cost import dollars
from entrypoint.training import outputs

GB = 1e9
MARGIN = 1.30
# The seed guide writes "/ 730", but its own measured $0.0694 per hour for 250 GB at $0.20 per
# GB-month is 50 / 720: the provider bills a 30-day month. 730 would give $0.0685.
HOURS_PER_MONTH = 720


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
    zipped: bool = False,
) -> tuple[list[str], int]:
    """The lines that show the sum, and the whole GB to allocate: everything a run writes on
    the volume. ``tars``: how many tars ``tar_name`` stands for (a shard index's shards, a
    published dataset's files); ``start_weights``, ``teacher``: their files' bytes;
    ``exports``: how many EXPORT formats; ``zipped``: the dataset is a zip, kept on the volume
    until its files are out."""
    run = outputs.Outputs(checkpoint, epochs, save_period, exports)
    held = tar_bytes if zipped else 0
    parts = [tar_bytes, held, tar_bytes, run.checkpoints, start_weights, teacher, run.exported]
    subtotal = sum(parts) + XET_SHARD_CACHE + XET_LOGS
    total = subtotal * MARGIN
    allocate = math.ceil(total / GB)
    lines = [
        f"dataset      {tar_name}: {tar_bytes / GB:.3f} GB"
        + (f" in {tars} {'shards' if tar_name.endswith('.json') else 'files'}" if tars > 1 else "")
        + f", extracted as it streams (no tar is stored): {tar_bytes / GB:.3f} GB",
        *(
            [f"zip          {held / GB:.3f} GB: the zip stays until its files are out"]
            if held
            else []
        ),
        f"new commit   {tar_bytes / GB:.3f} GB: a new commit of the dataset stages beside the "
        "old copy, which goes once the new one is complete",
        f"checkpoints  {checkpoint / GB:.3f} GB each x {run.kept} (best, last, {run.snapshots} "
        f"snapshot(s): {epochs} epochs / SAVE_PERIOD {save_period}) x 2 (weights/ and "
        f"its published copy) = {run.checkpoints / GB:.3f} GB",
        f"start        {start_weights / GB:.3f} GB (MODEL's weights, fetched once)",
        f"teacher      {teacher / GB:.3f} GB (distill_model's files)",
        f"exports      {exports} format(s) x {run.model / GB:.3f} GB (the weights) x 2 (export/ "
        f"and its published copy) = {run.exported / GB:.3f} GB",
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


def cost(cards: list[tuple[str, float, float]], epochs: int, overhead_min: float = 0.0
         ) -> list[str]:  # fmt: skip
    """The run's cost on each card ``(name, USD per hour, seconds per epoch)``: per epoch, for
    ``epochs`` epochs and ``overhead_min`` minutes billed without training (start, staging,
    the final upload), cheapest first. The guide's point: $/hour is the wrong figure."""
    rows = []
    for name, per_hour, epoch_s in cards:
        hours = (epochs * epoch_s + overhead_min * 60) / 3600
        rows.append((hours * per_hour, name, per_hour, epoch_s, hours))
    rows.sort()
    lines = []
    for total, name, per_hour, epoch_s, hours in rows:
        lines.append(f"{name:<16} ${per_hour:.3f}/h x {epoch_s:g} s/epoch = "
                     f"${dollars(epoch_s, per_hour):.4f} per epoch; {epochs} epochs"
                     f"{f' + {overhead_min:g} min' if overhead_min else ''}: {hours:.2f} h, "
                     f"${total:.2f}")  # fmt: skip
    if len(rows) > 1:
        cheap, fast = rows[0], min(rows, key=lambda row: row[4])
        lines.append(f"cheapest     {cheap[1]}" + ("" if cheap is fast else
                     f"; fastest {fast[1]}, {fast[0] - cheap[0]:+.2f} USD for "
                     f"{(cheap[4] - fast[4]):.2f} h sooner"))  # fmt: skip
    return lines
