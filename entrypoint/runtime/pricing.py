"""The machine's price, read by the watchdog at its start and every ``cost.PRICE_SECONDS``
(never on the training path): ``PRICE_PER_HOUR`` when set, else the provider's API (RunPod,
vast.ai) through ``gateways.provider``. A price that cannot be read is said once, with what
to set, and the run goes on without money figures; a read that fails after one that worked
keeps the last price."""

import logging
import threading
import time
from pathlib import Path
from typing import Any

from entrypoint.gateways import provider
from entrypoint.settings.config import Config
from entrypoint.state import cost, store
from entrypoint.training import publish

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
        if job and (others := store.node_prices(self.cfg.workspace)) != self.others:
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
            cost.note_price(self.cfg.workspace, total, self.source + nodes, now, unknown)

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
    mine = cost.container(cfg.workspace, now, training_over=over)
    if mine is None:
        held = store.prices(cfg.workspace)
        mine_too = held.get("container_started") == store.clock(cfg.workspace).get("started")
        return {"unknown": held["unknown"]} if mine_too and held.get("unknown") else None
    before = cost.earlier(store.manifest(publish.folder(cfg.run_dir)), mine["container_started"])
    return cost.summary(mine, before, state.get("training") or {})


def before_start(run_dir: Path, manifest: dict[str, Any] | None = None) -> tuple[float, float]:
    """What the run's earlier containers cost and their last epoch's cost, as its manifest
    keeps them (the Hub's on a resume, else the volume's)."""
    return cost.so_far(manifest if manifest is not None else
                       store.manifest(publish.folder(run_dir)))  # fmt: skip
