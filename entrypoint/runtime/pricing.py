"""The machine's price and what the run cost.

The price is read by the watchdog at its start and every ``cost.PRICE_SECONDS`` (never on the
training path): ``PRICE_PER_HOUR`` when set, else the provider's API (RunPod, vast.ai)
through ``gateways.provider``. A price that cannot be read is said once, with what to set,
and the run goes on without money figures; a read that fails after one that worked keeps the
last price. ``figures`` is the status's money block, ``before_start`` what the run's earlier
containers spent (for ``MAX_COST`` before staging), ``report`` the job's last word on the
seconds billed idle and the dollars spent (``state.cost`` does the arithmetic)."""

import logging
import threading
import time
from pathlib import Path
from typing import Any

from entrypoint.gateways import provider
from entrypoint.settings.config import Config
from entrypoint.state import budget, cost, snapshot, status, store, view
from entrypoint.training import progress, publish

log = logging.getLogger("trainbox")

SET_IT = "set PRICE_PER_HOUR (USD per hour for this machine) for money figures"


class Pricing:
    """The watchdog's price reader: ``read`` starts a read when one is due, in a thread of its
    own (a provider's answer may take its 30 s timeout; the watchdog checks every 2 s). On
    node 0 of a job of several machines, the price kept is the job's: this machine's plus the
    other nodes' as they said it once training began (``training.distributed``)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.due = 0.0
        self.said = ""
        self.reading: threading.Thread | None = None
        self.own: float | None = None
        self.source = ""
        self.others: dict[str, float] = {}
        self.lock = threading.Lock()

    def read(self, now: float) -> None:
        job = self.cfg.nnodes > 1 and self.cfg.node_rank == 0
        if job and (others := store.node_prices(self.cfg.volume)) != self.others:
            self.others = others
            self._note(now, "")
        if now < self.due or (self.reading and self.reading.is_alive()):
            return
        self.due = now + cost.PRICE_SECONDS
        self.reading = threading.Thread(target=self._read, args=(now,), daemon=True)
        self.reading.start()

    def _read(self, now: float) -> None:
        per_hour, source, unknown = self._ask()
        if per_hour is None and self.own is not None:
            return  # keep the last price read; the next read may work again
        self.own, self.source = per_hour, source
        self._note(now, unknown)
        if unknown and unknown != self.said:
            log.warning("no price for this machine: %s", unknown)
        elif per_hour is not None and not self.said.startswith("price"):
            log.info("price: $%.3f per hour (%s)", per_hour, source)
        self.said = unknown or f"price {per_hour}"

    def _note(self, now: float, unknown: str) -> None:
        """Keep the price: this machine's, plus the other nodes' once they said theirs."""
        with self.lock:
            if self.own is None and not unknown:
                return
            total = None if self.own is None else self.own + sum(self.others.values())
            nodes = f" + {len(self.others)} other node(s)" if self.others else ""
            cost.note_price(self.cfg.volume, total, self.source + nodes, now, unknown)

    def _ask(self) -> tuple[float | None, str, str]:
        if self.cfg.price_per_hour:
            return self.cfg.price_per_hour, "PRICE_PER_HOUR", ""
        found = provider.machine()
        if found is None:
            return None, "", f"no provider API tells it here; {SET_IT}"
        try:
            return provider.price(found, self.cfg.vast_api_url, self.cfg.runpod_api_url), \
                found.provider, ""  # fmt: skip
        except provider.PriceUnknown as err:
            return None, found.provider, f"{err}; {SET_IT}"


def figures(cfg: Config, state: dict[str, Any], now: float | None = None) -> dict[str, Any] | None:
    """The status's ``cost`` block now; ``{"unknown": why}`` when the price cannot be read;
    None before the first read."""
    now = time.time() if now is None else now
    over = state.get("phase") not in ("preflight", "resuming", "staging", "training")
    mine = cost.container(cfg.volume, now, training_over=over)
    if mine is None:
        held = store.prices(cfg.volume)
        mine_too = held.get("container_started") == store.clock(cfg.volume).get("started")
        return {"unknown": held["unknown"]} if mine_too and held.get("unknown") else None
    before = cost.earlier(store.manifest(snapshot.folder(cfg.run_dir)), mine["container_started"])
    return cost.summary(mine, before, state.get("training") or {})


def before_start(run_dir: Path, manifest: dict[str, Any] | None = None) -> tuple[float, float]:
    """What the run's earlier containers cost and their last epoch's cost, as its manifest
    keeps them (the Hub's on a resume, else the volume's)."""
    return cost.so_far(manifest if manifest is not None else
                       store.manifest(snapshot.folder(run_dir)))  # fmt: skip


def report(cfg: Config) -> None:
    """At the job's end: the seconds this container was billed without training, and what the
    run has cost, in the status and the last lines."""
    _report_billing(cfg)
    _report_cost(cfg)


def _report_billing(cfg: Config) -> None:
    """The seconds this container was billed without training, in the status and the log.
    Computed once: with OUTPUT_REPO by the final upload (``upload.flush``), up to its start,
    into the manifest the Hub gets; without, here, into the volume's manifest."""
    if cfg.output_repo:  # the published folder stays what the Hub holds
        bill = _uploaded_bill(cfg) or budget.billed(cfg.volume, time.time())
    elif bill := budget.billed(cfg.volume, time.time()):
        snapshot.keep(cfg.run_dir, billed=bill)
    if bill:
        status.note(cfg.volume, billed=bill)
        log.info(view.billed_line(bill))


def _report_cost(cfg: Config) -> None:
    """What the run has cost, in the status and the last lines; without OUTPUT_REPO into the
    volume's manifest (with it, the final upload recorded it, up to its start)."""
    now = time.time()
    if cfg.output_repo:
        mine = cost.container(cfg.volume, now, training_over=True)
    else:
        mine = publish.final_cost(cfg.volume, cfg.run_dir, now)
        snapshot.keep(cfg.run_dir, costs=mine)
    if mine is None:
        return
    state = status.read(cfg.volume)  # LibreYOLO's last fields over the watchdog's copy
    state["training"] = {**state.get("training", {}), **progress.training(cfg.run_dir)[0]}
    if not (money := figures(cfg, state, now)) or "spent" not in money:
        return
    # with the training fields it was computed from (LibreYOLO's last), so that it adds up
    fresh = {"training": state["training"]} if state["training"] else {}
    status.note(cfg.volume, cost=money, **fresh)
    log.info("cost: the run has cost $%.2f (%s of it idle: before and after training), this "
             "container $%.2f at $%.3f/h (%s)", money["spent"], f"${money['idle']:.2f}",
             mine["usd"], mine["per_hour"], mine["source"])  # fmt: skip
    if cfg.max_cost and money["spent"] > cfg.max_cost:
        log.info("cost: MAX_COST=$%.2f passed by $%.2f (the epoch in progress and the end)",
                 cfg.max_cost, money["spent"] - cfg.max_cost)  # fmt: skip


def _uploaded_bill(cfg: Config) -> dict | None:
    """This container's bill as the final upload recorded it, if it ran."""
    started = store.clock(cfg.volume).get("started")
    bills = store.manifest(snapshot.folder(cfg.run_dir)).get("billed", [])
    return next((b for b in bills if b.get("container_started") == started), None)
