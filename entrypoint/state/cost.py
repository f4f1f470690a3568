"""Money: what this machine costs, what the run has cost so far and what it will cost.

The price is read by the watchdog (``PRICE_PER_HOUR``, else the provider's API through
``gateways.provider``) and kept in the store at each change; every figure here is arithmetic on
the store's files, so anyone can recompute it from the status file and the manifest:

- this container's spend: its price history integrated from the container's start (billing
  starts with the container: the first price read counts from then) to now;
- the run's spend: this container's, plus every earlier container's entry in the run's
  manifest (``costs``: one per container, written at each epoch and at the end, so a
  preempted container's spend is known up to its last epoch);
- an epoch's cost: LibreYOLO's ``epoch_seconds`` of the last finished epoch (validation
  included) at today's price; the projection: the spend plus the epochs left at that cost;
- idle: the billed seconds without training (``budget``'s: before the first step, after the
  last) at their price.

Standard library only: the status screen imports it.
"""

from typing import Any

from entrypoint.settings.launchers import Volume
from entrypoint.state import store

PRICE_SECONDS = 300  # between price reads: vast.ai answers 429 past a small rate


def note_price(volume: Volume, per_hour: float | None, source: str, now: float,
               unknown: str = "") -> None:  # fmt: skip
    """Record a price read at ``now`` (a change adds to the history) or why there is none."""
    started = store.clock(volume).get("started")
    kept = store.prices(volume)
    if kept.get("container_started") != started:
        kept = {"container_started": started, "history": []}
    history = list(kept.get("history", []))
    if per_hour is not None and (not history or history[-1][1] != per_hour):
        history.append([store.stamp(now), per_hour])
    store.write_prices(volume, {**kept, "source": source, "history": history,
                                   "read_at": store.stamp(now), "unknown": unknown})  # fmt: skip


def dollars(seconds: float, per_hour: float) -> float:
    """What ``seconds`` of the machine cost at ``per_hour``."""
    return seconds * per_hour / 3600


def price_now(volume: Volume) -> float | None:
    """This container's last price read, in USD per hour; None while none is known."""
    held, started = store.prices(volume), store.clock(volume).get("started")
    history = held.get("history") or []
    return history[-1][1] if history and held.get("container_started") == started else None


def usd(history: list, started: float, begin: float, end: float) -> float:
    """What the machine cost from ``begin`` to ``end``: each price from its reading to the
    next, the first from the container's start."""
    total = 0.0
    for i, (at, per_hour) in enumerate(history):
        since = started if i == 0 else store.moment(at) or started
        until = store.moment(history[i + 1][0]) or end if i + 1 < len(history) else end
        total += dollars(max(0.0, min(until, end) - max(since, begin)), per_hour)
    return total


def container(volume: Volume, now: float, *, training_over: bool,
              epoch_seconds: float | None = None) -> dict[str, Any] | None:  # fmt: skip
    """This container's entry: its price source and last price, its billed seconds and USD,
    the USD of its idle seconds and, given its last epoch's seconds, of that epoch; None while
    no price is known."""
    held, clock = store.prices(volume), store.clock(volume)
    started = store.moment(clock.get("started"))
    history = held.get("history") or []
    if started is None or not history or held.get("container_started") != clock.get("started"):
        return None
    first, last = store.moment(clock.get("first_step")), store.moment(clock.get("last_step"))
    idle = usd(history, started, started, first or now)
    if training_over and last is not None:
        idle += usd(history, started, last, now)
    found = {"container_started": clock["started"], "source": held.get("source", ""),
             "per_hour": history[-1][1], "seconds": round(now - started),
             "usd": round(usd(history, started, started, now), 4),
             "idle_usd": round(idle, 4)}  # fmt: skip
    if last is not None:  # what it had cost when its last epoch ended (MAX_COST's moment)
        found["usd_at_last_step"] = round(usd(history, started, started, last), 4)
    if epoch_seconds:
        found["per_epoch"] = round(dollars(epoch_seconds, history[-1][1]), 4)
    return found


def earlier(manifest: dict[str, Any], entry_started: str | None) -> list[dict[str, Any]]:
    """The run's other containers' entries in its manifest."""
    return [e for e in manifest.get("costs", []) if e.get("container_started") != entry_started]


def so_far(manifest: dict[str, Any]) -> tuple[float, float]:
    """What the run's containers in ``manifest`` cost, and the last epoch's cost there (0.0
    when none finished one)."""
    entries = manifest.get("costs", [])
    last = next((e["per_epoch"] for e in reversed(entries) if e.get("per_epoch")), 0.0)
    return sum(e.get("usd", 0.0) for e in entries), last


def summary(mine: dict[str, Any], before: list[dict[str, Any]],
            training: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The status's ``cost``: ``per_hour``, ``source``, ``spent``, ``per_epoch``,
    ``projected``, ``idle`` (USD), and ``at_epoch_end`` (spent when the last epoch ended)."""
    spent = mine["usd"] + sum(e.get("usd", 0.0) for e in before)
    idle = mine["idle_usd"] + sum(e.get("idle_usd", 0.0) for e in before)
    found: dict[str, Any] = {"per_hour": mine["per_hour"], "source": mine["source"],
                             "spent": round(spent, 4), "idle": round(idle, 4)}  # fmt: skip
    if "usd_at_last_step" in mine:
        found["at_epoch_end"] = round(spent - mine["usd"] + mine["usd_at_last_step"], 4)
    seconds = training.get("epoch_seconds")
    if isinstance(seconds, int | float) and seconds > 0:
        per_epoch = dollars(seconds, mine["per_hour"])
        left = max(0, training.get("total_epochs", 0) - training.get("completed_epochs", 0))
        found |= {"per_epoch": round(per_epoch, 4), "projected": round(spent + left * per_epoch, 4)}
    return found


def line(cost: dict[str, Any]) -> str:
    """The status screen's money line."""
    if "unknown" in cost:
        return f"unknown: {cost['unknown']}"
    text = f"${cost['spent']:.2f} so far at ${cost['per_hour']:.3f}/h ({cost['source']})"
    if "per_epoch" in cost:
        text += f", ${cost['per_epoch']:.3f}/epoch, ${cost['projected']:.2f} projected"
    return text + f", ${cost['idle']:.2f} of it idle"


# The guide's advice for each of LibreYOLO's profile verdicts ("$/hour is the wrong figure to
# optimise": a small model leaves a big card half idle).
ADVICE = {
    "dataloader": "the GPU waits for data: more WORKERS first; a faster card buys nothing, and a "
                  "cheaper card with at least {share} of this one's speed trains as fast",
    "host / launch": "the GPU waits for the host: a larger BATCH first; a faster card buys "
                     "nothing, and a cheaper card with at least {share} of this one's speed "
                     "trains as fast",
    "compute": "the card is the lever: a faster card trains faster; compare cards by cost per "
               "epoch, not per hour",
    "memory-pressure": "the card's memory is the limit: a smaller BATCH or IMGSZ, or a card with "
                       "more memory",
}  # fmt: skip


def advice(profile: dict[str, Any], per_hour: float | None) -> dict[str, Any]:
    """``profile`` (``progress.profile``) with the advice its verdict calls for and, at
    ``per_hour``, what 1,000 training images cost at its measured speed."""
    share = profile.get("gpu_util")
    said = ADVICE.get(str(profile.get("bound")), "see LibreYOLO's verdict")
    found = {
        **profile,
        "advice": said.format(
            share=f"{share:.0%}" if isinstance(share, int | float) else "this card's busy share"
        ),
    }
    speed = profile.get("img_per_s")
    if per_hour and isinstance(speed, int | float) and speed > 0:
        found["per_1000_images"] = round(dollars(1000 / speed, per_hour), 4)
    return found
