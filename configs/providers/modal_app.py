"""trainbox on Modal: `modal run --detach configs/providers/modal_app.py`.

--detach: the app goes on running when the laptop that launched it sleeps, loses its
connection or quits ("Don't stop the app if the local process dies or disconnects":
`modal run --help`, modal 1.6.4); without it, Modal stops the app with the local process.
`modal app list` and `modal app logs APP_ID` find it again, `modal app stop APP_ID` ends it.
The image runs as is (its tini entrypoint cleared: Modal starts its own), the run lives on a
Modal volume at /workspace, and HF_TOKEN comes from the Modal secret ``huggingface``. Modal
ends a function at ``timeout`` (at most 24 hours), so MAX_RUNTIME stops training first and
leaves STOP_GRACE for the final upload; a new `modal run --detach` resumes.
"""

import os
import subprocess

import modal

IMAGE = "ghcr.io/OWNER/trainbox:0.1.0-cu126"
TIMEOUT = 24 * 60 * 60  # Modal's maximum
SETTINGS = {
    "DATASET_REPO": "my-org/my-dataset",
    "OUTPUT_REPO": "my-org/my-run",
    "EPOCHS": "100",
    "STOP_GRACE": "110",
    "MAX_RUNTIME": str(TIMEOUT - 300),  # the grace and the shutdown fit before Modal's end
}

app = modal.App("trainbox")
image = modal.Image.from_registry(IMAGE).entrypoint([]).env(SETTINGS)
workspace = modal.Volume.from_name("trainbox-workspace", create_if_missing=True)


@app.function(
    image=image,
    gpu="H100",
    timeout=TIMEOUT,
    volumes={"/workspace": workspace},
    secrets=[modal.Secret.from_name("huggingface")],
)
def train() -> int:
    """The container's job, then the volume committed so the next run sees it."""
    code = subprocess.run(["trainbox", "run"], env=os.environ, check=False).returncode
    workspace.commit()
    return code
