"""trainbox on Modal: `modal run --detach configs/providers/modal_app.py`.

--detach: the app goes on running when the laptop that launched it sleeps, loses its
connection or quits ("Don't stop the app if the local process dies or disconnects":
`modal run --help`, modal 1.6.4); `modal app list` and `modal app logs APP_ID` find it again,
`modal app stop APP_ID` ends it. The image runs as is (its tini entrypoint cleared: Modal
starts its own), the run lives on a v2 Modal volume at /workspace, and HF_TOKEN comes from the
Modal secret ``huggingface``. Sources: the modal 1.6.4 wheel and modal.com/docs (guide/
preemption, guide/volumes, guide/retries, guide/timeouts), read 2026-12-02.

- A stop (preemption, `modal app stop`, `modal container stop`) is SIGINT to this function's
  process, then SIGKILL about 30 s later (modal/exception.py, simulate_preemption: "After 30
  seconds, a second interrupt"); GPU functions cannot opt out of preemption. ``subprocess.run``
  would SIGKILL trainbox 0.25 s after the SIGINT, mid-upload; so ``train`` turns the SIGINT
  (or SIGUSR1, an input cancelled) into one SIGTERM for trainbox, waits for its final upload
  (STOP_GRACE 20 s, leaving Modal's own volume commit room in the 30), then re-raises: Modal
  records no result and runs a preempted input again, on a new container that resumes from the
  volume or the Hub (preemptions do not count against ``retries``).
- Modal ends a function at ``timeout`` (at most 24 hours): MAX_RUNTIME stops training first
  (exit 8), and ``train`` raises so that ``retries`` start a fresh container that resumes, as
  Modal's long-training example does (modal-examples 06_gpu_and_ml/long-training.py:
  ``retries``, one input per container). trainbox's other exits are returned, never retried.
- Volume v2: no limit on the number of files (v1 stops at 500,000 inodes, which a staged
  detection dataset and the Hugging Face cache can reach). An existing v1 volume cannot become
  v2: this one has a name of its own.
"""

import os
import signal
import subprocess

import modal

IMAGE = "ghcr.io/OWNER/trainbox:0.1.0-cu126"
TIMEOUT = 24 * 60 * 60  # Modal's maximum
TIME_LIMIT = 8  # trainbox's exit when MAX_RUNTIME ends the run (docs/exit-codes.md)
GRACE = 30  # Modal's seconds from its SIGINT to its SIGKILL
SETTINGS = {
    "DATASET_REPO": "my-org/my-dataset",
    "OUTPUT_REPO": "my-org/my-run",
    "EPOCHS": "100",
    "STOP_GRACE": "20",  # of Modal's 30 s; the rest for supervisord's exit and the commit
    "MAX_RUNTIME": str(TIMEOUT - 300),  # the grace and the shutdown fit before Modal's end
    # USD per hour of gpu= below, from modal.com/pricing (per second there: x 3600); no API
    # tells the container. 0: no money figures; MAX_COST needs it.
    "PRICE_PER_HOUR": "0",
}

app = modal.App("trainbox")
image = modal.Image.from_registry(IMAGE).entrypoint([]).env(SETTINGS)
workspace = modal.Volume.from_name("trainbox-workspace-v2", create_if_missing=True, version=2)


@app.function(
    image=image,
    gpu="H100",
    timeout=TIMEOUT,
    volumes={"/workspace": workspace},
    # HF_TOKEN from the secret "huggingface"; put NOTIFY (Apprise URLs, docs/watching.md) in
    # it too to hear of the run.
    secrets=[modal.Secret.from_name("huggingface")],
    retries=modal.Retries(max_retries=10, initial_delay=0.0, backoff_coefficient=1.0),
    single_use_containers=True,  # each attempt on a fresh container
)
def train() -> int:
    """trainbox in a session of its own; Modal's stop reaches it as one SIGTERM."""
    child = subprocess.Popen(["trainbox", "run"], env=os.environ, start_new_session=True)
    stopped_by: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        if not stopped_by:  # one SIGTERM: trainbox's STOP_GRACE counts from it
            stopped_by.append(signum)
            child.send_signal(signal.SIGTERM)

    # A Modal function runs in the main thread, so its handlers can be set here; Modal's own
    # (SIGINT: KeyboardInterrupt; SIGUSR1: InputCancellation) come back afterwards.
    previous = {sig: signal.signal(sig, stop)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}  # fmt: skip
    try:
        code = child.wait()  # resumed after each handler (PEP 475): the final upload ends it
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped_by == [signal.SIGUSR1]:
        raise modal.exception.InputCancellation("input cancelled: trainbox stopped")
    if stopped_by:
        raise KeyboardInterrupt  # no result: a preempted input is run again
    workspace.commit()  # Modal commits on exit too; this one shows an error here
    if code == TIME_LIMIT:
        raise RuntimeError("MAX_RUNTIME reached: a fresh container resumes the run")
    return code
