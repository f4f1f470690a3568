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
"""

import os
import subprocess

from beam import Image, Volume, function

IMAGE = "ghcr.io/OWNER/trainbox:0.1.0-cu126"
TIMEOUT = 24 * 60 * 60  # seconds, explicit: as long as Modal's
SETTINGS = {
    "DATASET_REPO": "my-org/my-dataset",
    "OUTPUT_REPO": "my-org/my-run",
    "EPOCHS": "100",
    "STOP_GRACE": "110",
    "MAX_RUNTIME": str(TIMEOUT - 300),  # the grace and the shutdown fit before Beam's end
}

workspace = Volume(name="trainbox-workspace", mount_path="/workspace")


@function(
    name="trainbox",
    image=Image(base_image=IMAGE),
    gpu="H100",
    cpu=8,
    memory="64Gi",
    timeout=TIMEOUT,
    retries=1,
    volumes=[workspace],
    secrets=["HF_TOKEN"],
    env=SETTINGS,
    headless=True,
)
def train() -> int:
    """The container's job; the volume is shared storage, nothing to commit."""
    return subprocess.run(["trainbox", "run"], env=os.environ, check=False).returncode


if __name__ == "__main__":
    train.remote()
