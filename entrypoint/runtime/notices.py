"""What the person who walked away hears, and when: one message per event and run, built
from the status, sent through ``gateways.notify`` (``NOTIFY``, ``NOTIFY_EVENTS``).

The events: ``started`` (the first finished epoch: its seconds, the ETA, the projected cost;
the watchdog sees it), ``completed`` (the scores, epochs, hours, dollars, the card's page),
``failed`` (an end for good: the exit code and the last line's words), ``budget``
(``MAX_COST``), ``watchdog`` (``MAX_RUNTIME``, ``STALL_TIMEOUT``), ``stopped`` (a stop signal
or a preemption: the epoch it resumes from), and ``billing`` (the machine could not be
stopped and stays up idle: at once, then every hour, with what it has cost since the run
ended). Each but ``billing`` at most once per run, across the container's starts (the volume's
``notified-RUN.json``, written before the send: at most once, never twice) and machines (the
run's manifest carries the record to the Hub with each epoch's copy and the final upload; the
end's own event goes up as ``RUN/notified.json`` in the card's commit; a resume takes both
in); a run already completed when a start begins says nothing new. Node 0 alone speaks for
the job.
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from entrypoint.gateways import notify
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from entrypoint.training import evaluation

log = logging.getLogger("trainbox")

BILLING_EVERY_S = 3600.0


def _duration(seconds: float | None) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{seconds:.0f} s"


def _money(value: Any) -> str:
    return f"${value:.2f}" if isinstance(value, int | float) else "no price known"


def _scores(state: dict[str, Any]) -> str:
    found = state.get("evaluation") or {}
    parts = []
    for split, label in (("test", "test"), ("val", "validation")):
        if scores := found.get(split):
            first = next((k for k in evaluation.HEADLINE if k in scores), None)
            if first:
                parts.append(f"{label} {first.removeprefix('metrics/')} {scores[first]:.4f} "
                             f"on {scores.get('images', '?')} images")  # fmt: skip
    return "; ".join(parts) or "no score (EVALUATE, or no evaluation yet)"


def text(event: str, state: dict[str, Any], line: str = "") -> tuple[str, str]:
    """(title, body) of ``event``'s message, from the status (and the last line's words)."""
    run = state.get("run", "run")
    training, money = state.get("training") or {}, state.get("cost") or {}
    epochs = f"{training.get('completed_epochs', 0)}/{training.get('total_epochs', '?')}"
    if event == "started":
        price = f" at {_money(money['per_hour'])}/h" if "per_hour" in money else ""
        body = (f"epoch {epochs} done in {training.get('epoch_seconds', 0):.1f} s; ETA "
                f"{_duration(training.get('eta_seconds'))}; projected "
                f"{_money(money.get('projected'))}{price}")  # fmt: skip
        return f"trainbox: {run} is training", body
    if event == "completed":
        hours = state.get("training_hours")
        body = (f"{_scores(state)}. {epochs} epochs"
                + (f" in {hours:.2f} h" if isinstance(hours, int | float) else "")
                + f"; {_money(money.get('spent'))} spent"
                + (f"; model card: {state['card']}" if state.get("card") else ""))  # fmt: skip
        return f"trainbox: {run} completed", body
    if event == "billing":
        return f"trainbox: {run}: the machine still bills", line
    titles = {"failed": f"failed (exit {state.get('exit_code')})", "budget": "stopped at MAX_COST",
              "watchdog": f"stopped by its watchdog (exit {state.get('exit_code')})",
              "stopped": "stopped"}  # fmt: skip
    body = line or state.get("reason") or ""
    if event == "stopped":
        body = (f"a stop signal or a preemption; {epochs} epochs done, a restart resumes from "
                f"the last uploaded one. {body}").strip()  # fmt: skip
    if "spent" in money and event != "stopped":
        body += f" ({_money(money['spent'])} spent)"
    return f"trainbox: {run} {titles[event]}", body


def wanted(events: str, event: str) -> bool:
    """Whether NOTIFY_EVENTS asks for ``event``."""
    return event in {e.strip() for e in events.split(",")}


def tell(volume: Volume, run_dir: Path, events: str, event: str, line: str = "", *,
         once: bool = True, timeout: float = notify.TIMEOUT_S, **facts: Any) -> bool:  # fmt: skip
    """Send ``event``'s message if it is ``due`` (``once``: not if the run has had it), within
    ``notify.TIMEOUT_S``. ``facts`` join the status's for the text (``training_hours``).
    Whether it was sent."""
    if not due(volume, run_dir.name, events, event, once=once):
        return False
    send(volume, run_dir.name, event, line, timeout=timeout, **facts)
    return True


def due(volume: Volume, run: str, events: str, event: str, *, once: bool = True) -> bool:
    """Whether ``event`` is to be sent: NOTIFY is set, NOTIFY_EVENTS wants it, this is node 0
    and (``once``) the run has not had it, in which case it is recorded as had, before the
    send: at most once, never twice."""
    if volume.node != 0 or not os.environ.get("NOTIFY", "").strip() or not wanted(events, event):
        return False
    if once:
        told = store.notified(volume.root, run)
        if event in told:
            return False
        store.write_notified(volume.root, run, {**told, event: store.stamp()})
    return True


def send(volume: Volume, run: str, event: str, line: str = "", *,
         timeout: float = notify.TIMEOUT_S, **facts: Any) -> None:  # fmt: skip
    """``event``'s message to NOTIFY's URLs, its text from the status, ``facts`` and ``line``."""
    title, body = text(event, {**store.status(volume), **facts, "run": run}, line)
    answered = notify.send(title, body, timeout=timeout)
    log.info("NOTIFY: %s sent to %d of %d", event, sum(answered.values()), len(answered))


def remember(workspace: Path, run: str, told: dict[str, str] | None) -> None:
    """Take in the events an earlier machine's containers sent for the run (its manifest on
    the Hub keeps them), so that none is sent again here."""
    here = store.notified(workspace, run)
    merged = {**(told or {}), **here}
    if merged != here:
        store.write_notified(workspace, run, merged)


def aside(work: Callable[[], Any]) -> None:
    """Run a send in a thread of its own: off a loop that must not wait for a service."""
    threading.Thread(target=work, daemon=True).start()


class Billing:
    """The ``billing`` message while a machine that could not be stopped stays up idle: at
    once, then every BILLING_EVERY_S, with what it has cost since ``since`` (the run's end)."""

    def __init__(self, send: Callable[[str], Any], line: str, per_hour: float | None,
                 since: float) -> None:  # fmt: skip
        self.send, self.line, self.per_hour, self.since = send, line, per_hour, since
        self.last: float | None = None

    def tick(self, now: float | None = None) -> bool:
        """Send when due; whether it sent."""
        now = time.time() if now is None else now
        if self.last is not None and now - self.last < BILLING_EVERY_S:
            return False
        self.last = now
        hours = (now - self.since) / 3600
        money = (f"${self.per_hour * hours:.2f} since the run ended ({hours:.1f} h at "
                 f"${self.per_hour:.3f}/h)" if self.per_hour else f"{hours:.1f} h since the "
                 "run ended (no price known)")  # fmt: skip
        self.send(f"{self.line} It has cost {money}.")
        return True
