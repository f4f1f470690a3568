"""The Hub client, set up once: huggingface_hub imported on first use with hf_xet's settings,
the token, the API client, a file's URL, and ``Target``, what a call is about for its error
message; and the check of the HF_XET_* durations a user set.

Requests time out: huggingface_hub's own client has no timeout (``timeout=None`` in
``utils/_http.default_client_factory``), so a hanging Hub would hang a commit forever.
"""

import functools
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrypoint import __version__
from entrypoint.errors import ExitCode, TrainboxError

if TYPE_CHECKING:
    from huggingface_hub import HfApi

__all__ = ("XET_LOGS", "XET_SHARD_CACHE", "Target", "check_settings", "page", "url")

TIMEOUT = 120  # seconds a request waits for a byte: a hung Hub fails an attempt, not the run


# hf_xet's own timeouts and retries (its defaults: connect 60 s, read 300 s, 5 retries from
# 3 s; it has no write timeout, and a shard upload no read timeout), shortened so that a
# transfer left behind by ``Transfers.bounded`` mostly ends within a minute. Durations need
# their unit: a bare "5" is ignored (hf_xet logs "cannot be parsed ... reverting to default"
# only in its own log file). A value already in the environment wins. The caps bound
# HF_HOME/xet on the volume (by default its shard cache may grow to 16 GB and its logs to
# 250 MB).
XET_SHARD_CACHE, XET_LOGS = 2 * 10**9, 50 * 10**6  # bytes HF_HOME/xet may hold, at most
XET_SETTINGS = {
    "HF_XET_CLIENT_CONNECT_TIMEOUT": "10s",
    "HF_XET_CLIENT_READ_TIMEOUT": "30s",
    "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "1",  # retries: 2 attempts in all
    "HF_XET_CLIENT_RETRY_BASE_DELAY": "1s",
    "HF_XET_CLIENT_RETRY_MAX_DURATION": "10s",  # the longest single wait between attempts
    "HF_XET_SHARD_CACHE_SIZE_LIMIT": f"{XET_SHARD_CACHE // 10**6}MB",
    "HF_XET_LOG_DIR_MAX_SIZE": f"{XET_LOGS // 10**6}MB",
}
# hf_xet's durations: a number and its unit each, "30s", "500ms", "2m30s" (its own parser);
# a bare "5" it ignores, for its default, saying so only in its log file (hf_xet 1.8.0).
XET_DURATION = re.compile(r"(\d+(\.\d+)?\s*(ns|us|ms|s|m|h|d))+")
XET_DURATION_KEYS = ("_TIMEOUT", "_DELAY", "_DURATION", "_INTERVAL", "_AGE")


def check_settings(environ: Mapping[str, str]) -> None:
    """The HF_XET_* durations the user set, checked as hf_xet would read them."""
    for key, value in environ.items():
        if (key.startswith("HF_XET_") and key.endswith(XET_DURATION_KEYS) and value.strip()
                and not XET_DURATION.fullmatch(value.strip())):  # fmt: skip
            raise TrainboxError(
                f"{key}={value!r}: hf_xet reads a duration with its unit, such as 30s or "
                "500ms, and ignores a bare number; add the unit",
                ExitCode.CONFIG,
            )


@functools.cache
def _hf() -> Any:
    """huggingface_hub, imported on first use and set up once. Imported with the module, it and
    httpx2 took 0.13 s of the start of every trainbox process (python -X importtime), the
    training program's and those beside it included, which never talk to the Hub."""
    for key, value in XET_SETTINGS.items():  # read by hf_xet when its session starts
        os.environ.setdefault(key, value)
    import httpx2
    import huggingface_hub
    import huggingface_hub.errors
    import huggingface_hub.utils
    from huggingface_hub.utils._http import default_client_factory

    # huggingface_hub gives its logger a stderr handler of its own at import (utils/logging.py,
    # _configure_library_root_logger) and lets records propagate too: each of its lines, a
    # retry ("Retrying in 1s [Retry 1/5]"), reached the container's log twice. trainbox's
    # handler alone prints them now, prefixed like every other line.
    logging.getLogger("huggingface_hub").handlers.clear()

    def client() -> httpx2.Client:
        """huggingface_hub's own client, with timeouts."""
        made = default_client_factory()
        made.timeout = httpx2.Timeout(TIMEOUT, connect=10)
        return made

    huggingface_hub.set_client_factory(client)
    return huggingface_hub


def url(repo: str, name: str, revision: str, repo_type: str = "dataset") -> str:
    """The resolve URL of ``name`` in ``repo`` at ``revision``."""
    return _hf().hf_hub_url(repo, name, repo_type=repo_type, revision=revision)


def page(repo: str) -> str:
    """A model repo's page on the Hub (HF_ENDPOINT's), where its card shows."""
    return f"{_hf().constants.ENDPOINT.rstrip('/')}/{repo}"


@dataclass(frozen=True)
class Target:
    """What a call is about, for its error message: the setting that names the repo."""

    setting: str  # DATASET_REPO, OUTPUT_REPO or --repo
    repo: str
    name: str = ""
    revision: str = "main"
    repo_type: str = "dataset"

    @property
    def code(self) -> ExitCode:
        """The exit code when the Hub refuses this repo."""
        return ExitCode.UPLOAD if self.setting == "OUTPUT_REPO" else ExitCode.DATASET


def token() -> str | None:
    """HF_TOKEN, else the content of the file HF_TOKEN_FILE names (docker secrets)."""
    if value := os.environ.get("HF_TOKEN", "").strip():
        return value
    if path := os.environ.get("HF_TOKEN_FILE", "").strip():
        try:
            return Path(path).read_text().strip() or None
        except OSError as err:
            raise TrainboxError(
                f"HF_TOKEN_FILE={path}: cannot read it ({err.strerror}); mount the secret there",
                ExitCode.CONFIG,
            ) from None
    return None


def api() -> "HfApi":
    """The client, with the token; no progress bars (one per file per epoch would drown the
    container's log)."""
    hf = _hf()
    hf.utils.disable_progress_bars()
    return hf.HfApi(token=token(), library_name="trainbox", library_version=__version__)
