"""The one gateway to notification services: ``NOTIFY``'s Apprise URLs (``ntfy://``,
``slack://``, ``discord://``, ``tgram://``, ``mailto://``, ``json://`` and the rest Apprise
speaks), through the library itself: no HTTP client per service here.

``NOTIFY`` is a secret (a webhook URL holds its token): it is read from the environment where
it is used, like ``HF_TOKEN``, never a setting written to disk, and a URL is only ever shown
as Apprise's own privacy form (``json://user:****@host/...``). A send never harms the run: it
runs in a thread of its own, given ``TIMEOUT_S`` at most, and a URL that fails is one warning
line; no message carries a secret (``scrub``).
"""

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from entrypoint.errors import ExitCode, TrainboxError

log = logging.getLogger("trainbox")

TIMEOUT_S = 10.0  # the longest a send may hold whoever sends it
# Environment variables whose values no message may carry (the providers' keys, the token).
SECRETS = ("HF_TOKEN", "RUNPOD_API_KEY", "VAST_API_KEY", "CONTAINER_API_KEY", "NOTIFY")


def urls(raw: str) -> list[str]:
    """NOTIFY's URLs: separated by spaces or commas."""
    return [u for u in re.split(r"[\s,]+", raw.strip()) if u]


def _plugin(url: str) -> Any:
    import apprise

    logging.getLogger("apprise").setLevel(logging.CRITICAL)  # its lines may name a URL
    return apprise.Apprise.instantiate(url)


def shown(url: str) -> str:
    """A URL as it may be shown: Apprise's privacy form, or its scheme alone."""
    plugin = _plugin(url)
    return plugin.url(privacy=True) if plugin else url.split("://", 1)[0] + "://..."


def check(environ: Mapping[str, str]) -> None:
    """Every NOTIFY URL is one Apprise can send to; else exit 2, naming its scheme only."""
    for index, url in enumerate(urls(environ.get("NOTIFY", "")), 1):
        if _plugin(url) is None:
            raise TrainboxError(
                f"NOTIFY: URL {index} ({shown(url)}) is not one Apprise can send to; write it "
                "as the service's Apprise URL (https://github.com/caronc/apprise/wiki), e.g. "
                "ntfy://TOPIC or json://HOST:PORT/PATH",
                ExitCode.CONFIG,
            )


def scrub(text: str, environ: Mapping[str, str] = os.environ) -> str:
    """``text`` without any secret's value (a message is built from the status, which holds
    none; this is the belt to those braces)."""
    for name in SECRETS:
        for value in urls(environ.get(name, "")) if name == "NOTIFY" else [environ.get(name, "")]:
            if len(value) >= 4:
                text = text.replace(value, "***")
    return text


def send(title: str, body: str, environ: Mapping[str, str] = os.environ,
         timeout: float = TIMEOUT_S) -> dict[str, bool]:  # fmt: skip
    """Send one message to every NOTIFY URL, each in a thread of its own, within ``timeout``
    in all; {shown URL: whether it answered}. Never raises."""
    targets = urls(environ.get("NOTIFY", ""))
    if not targets:
        return {}
    title, body = scrub(title, environ), scrub(body, environ)
    answered: dict[str, bool] = {}

    def one(url: str) -> None:
        try:
            plugin = _plugin(url)
            answered[url] = bool(plugin and plugin.notify(body=body, title=title))
        except Exception:  # any: a service's failure is the warning below, never the run's
            answered[url] = False

    threads = [threading.Thread(target=one, args=(url,), daemon=True) for url in targets]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout  # all together: a hung service holds nothing up
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    result = {}
    for url in targets:
        ok, label = answered.get(url), shown(url)
        result[label] = bool(ok)
        if not ok:
            why = "no answer in time" if ok is None else "it did not take the message"
            log.warning("NOTIFY: %s: %s; the run goes on", label, why)
    return result
