"""trainbox on Beam: `cd configs/providers && python beam_app.py` (`pip install beam-client`,
then `beam login` and `beam secret create HF_TOKEN hf_...` once).

Beam pulls the image from the registry, runs its own runner in it (the image's tini entrypoint
is not used, as on Modal) and calls ``train``, which starts trainbox. The run lives on a Beam
volume at /workspace, HF_TOKEN comes from the Beam secret ``HF_TOKEN``, and the settings are
environment variables. ``headless=True``: the function goes on running when the laptop that
started it disconnects or quits (Ctrl-C says so), for the whole 24 hours; `beam task list`,
`beam logs --task-id ID` follow it, `beam task stop ID` ends it. Beam ends the task at
``timeout`` (no maximum is documented; the default is one hour), so MAX_RUNTIME stops
training first and leaves STOP_GRACE for the final upload; a new run resumes. A container that
crashes is run again at most ``retries`` times, and resumes from the volume or the Hub.
Sources (read 2026-11-30): docs.beam.cloud, v2/reference/py-sdk, v2/environment/secrets,
v2/topics/timeouts-and-retries, v2/environment/custom-registries (Debian-based x86 images);
beam-cloud/beta9 (0b79dfe), sdk/src/beta9/abstractions/function.py (timeout, retries, headless).
Run it from this folder: Beam uploads the working directory to the container.

What Beam does to the image (beam-cloud/beta9 0b79dfe, read 2026-12-02):
- Its build installs a Python for its runner and pip-installs the runner's pins into it
  (pkg/abstractions/image/builder.go, base_requirements.txt: rich 13.7.0, pydantic 2.5.3, ...).
  Asked for "python3" (the default), it would take the image's venv, or repoint the venv's
  /usr/bin/python3 at a 3.10; ``python_version="python3.12"`` gives the runner an interpreter
  of its own under /usr/local, and the image's venv (made by python3.11 by name) stays as
  pinned (tests/container/test_beam.py applies Beam's step to the image).
- A stop (`beam task stop`) or the timeout: the runner sends itself SIGTERM, whose handler
  ends it at once (sdk/src/beta9/runner/function.py), and as PID 1 it takes trainbox with it.
  ``train`` runs in the runner's main thread, so it takes SIGTERM over: trainbox gets it and
  its final upload (STOP_GRACE, within beta9's 30 s termination grace), then the runner's own
  handler ends the task as before.
"""

import os
import signal
import subprocess

from beam import Image, Volume, function

IMAGE = "ghcr.io/OWNER/trainbox:0.1.0-cu126"
TIMEOUT = 24 * 60 * 60  # seconds, explicit: as long as Modal's
SETTINGS = {
    "DATASET_REPO": "my-org/my-dataset",
    "OUTPUT_REPO": "my-org/my-run",
    "EPOCHS": "100",
    "STOP_GRACE": "25",  # within beta9's 30 s worker.terminationGracePeriod
    "MAX_RUNTIME": str(TIMEOUT - 300),  # the grace and the shutdown fit before Beam's end
    # USD per hour of gpu= below, from beam.cloud/pricing; no API tells the container.
    # 0: no money figures; MAX_COST needs it.
    "PRICE_PER_HOUR": "0",
}
RUNNER_ONLY = ("BETA9_TOKEN",)  # the runner's workspace token: nothing trainbox needs

workspace = Volume(name="trainbox-workspace", mount_path="/workspace")


@function(
    name="trainbox",
    image=Image(base_image=IMAGE, python_version="python3.12"),
    gpu="H100",
    cpu=8,
    memory="64Gi",
    timeout=TIMEOUT,
    retries=1,
    volumes=[workspace],
    secrets=["HF_TOKEN"],  # add "NOTIFY" (beam secret create NOTIFY ntfy://...) to hear of it
    env=SETTINGS,
    headless=True,
)
def train() -> int:
    """trainbox, handed the runner's stop signal; the volume is shared storage."""
    env = {k: v for k, v in os.environ.items() if k not in RUNNER_ONLY}
    child = subprocess.Popen(["trainbox", "run"], env=env, start_new_session=True)
    runners = signal.getsignal(signal.SIGTERM)

    def stop(signum: int, frame: object) -> None:
        child.send_signal(signal.SIGTERM)
        child.wait()  # its final upload, bounded by STOP_GRACE
        if callable(runners):
            runners(signum, frame)

    signal.signal(signal.SIGTERM, stop)
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGTERM, runners)


if __name__ == "__main__":
    train.remote()
