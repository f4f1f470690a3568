"""Weights leave the container every epoch, survive Hub faults and stops, and a run resumes
anywhere: on the same volume after a kill, or on an empty one from the Hub."""

import hashlib
import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from entrypoint.dataset import demo
from entrypoint.dataset.packed import archive
from entrypoint.errors import ExitCode
from tests.conftest import free_port
from tests.container.conftest import OUTPUT, docker, in_volume, run_container
from tests.standins.hub import GOOD_TOKEN, Fault, Hub
from tests.standins.webhook import Webhook

pytestmark = pytest.mark.container


def env_for(hub: Hub, **extra: str) -> dict[str, str]:
    return {"DEVICE": "cpu", "HF_ENDPOINT": hub.url,
            "HF_TOKEN": GOOD_TOKEN, "OUTPUT_REPO": OUTPUT, "UPLOAD_INTERVAL": "1",
            **extra}  # fmt: skip


def remote(hub: Hub, name: str) -> bytes | None:
    repo = hub.repos.get(f"models/{OUTPUT}")
    return repo.files.get(f"run/{name}") if repo else None


def local_sha(image: str, volume: str, path: str) -> str:
    return in_volume(image, volume, "sha256sum", path).split()[0]


def logs(result) -> str:
    return result.stdout + result.stderr


def test_every_epoch_is_uploaded_and_the_hub_matches_the_volume(
    image: str, volume: str, hub: Hub
) -> None:
    result = run_container(image, volume, env=env_for(hub, EPOCHS="4"))
    assert result.returncode == 0, logs(result)[-4000:]
    epochs = [line for line in logs(result).splitlines() if "uploaded epoch" in line]
    assert [line.split("uploaded epoch ")[1].split(":")[0] for line in epochs][-1] == "4"
    uploads_of_last = [
        name for name in logs(result).splitlines() if "uploaded epoch" in name and "last.pt" in name
    ]
    assert len(uploads_of_last) >= 3  # after (nearly) every epoch, not only at the end
    repo = hub.repos[f"models/{OUTPUT}"]
    pushed = {repo.snapshots[c].sha256("run/last.pt") for c in repo.commits
              if "run/last.pt" in repo.snapshots[c].files}  # fmt: skip
    assert len(pushed) >= 3 and pushed <= hub.xet_hashes.keys()  # each through Xet, as in prod
    assert not [path for method, path in hub.requests if method == "PUT"]  # no LFS upload
    ledger = json.loads(
        in_volume(image, volume, "cat", "/workspace/trainbox/ledger-org--weights--run.json")
    )
    index = json.loads(
        in_volume(image, volume, "cat", "/workspace/trainbox/published/run/index.json")
    )
    assert index["epoch"] == 4
    for name, digest in index["files"].items():
        assert hashlib.sha256(remote(hub, name)).hexdigest() == digest, name
        assert ledger["files"][f"run/{name}"]["sha256"] == digest
    assert (
        local_sha(image, volume, "/workspace/runs/run/weights/last.pt") == index["files"]["last.pt"]
    )
    manifest = json.loads(remote(hub, "manifest.json"))
    assert manifest["dataset"] == {"data": "the built-in demo"}
    assert manifest["torch"].startswith("2.14.1") and manifest["libreyolo"] == "1.6.0"
    the_run_ends_as_a_card(image, volume, hub, result)


# The test's own val of a best.pt, apart from trainbox's: the Hub's file, the staged test split.
INDEPENDENT_VAL = """
import json, sys
from huggingface_hub import hf_hub_download
from libreyolo import LibreYOLO
model = LibreYOLO(hf_hub_download(sys.argv[1], "run/best.pt"), device="cpu")
found = model.val(data="/workspace/data/demo/data.yaml", split="test", imgsz=128, batch=4,
                  workers=0, verbose=False, project="/tmp/val", name="t")
print(json.dumps({k: v for k, v in dict(found).items() if k.startswith("metrics/")}))
"""


def the_run_ends_as_a_card(image: str, volume: str, hub: Hub, result) -> None:
    """The demo (it has a test split) ends as a card on the Hub: huggingface_hub parses it,
    its test mAP50-95 is evaluation/test.json's, which is a separate val's of the Hub's
    best.pt on the staged test split; every picture it shows is in the repo; its snippet,
    run as printed, loads the model from the Hub and predicts; no commit holds README.md with
    a checkpoint; the last line gives the card's page."""
    from huggingface_hub import ModelCard

    repo = hub.repos[f"models/{OUTPUT}"]
    text = repo.files["README.md"].decode()
    entry = ModelCard(text).data.eval_results  # huggingface_hub's own reading
    test = {r.metric_type: r.metric_value for r in entry if r.dataset_split == "test"}
    written = json.loads(repo.files["run/evaluation/test.json"])
    assert written["images"] == demo.SPLITS["test"] and written["split"] == "test"
    assert written["checkpoint_sha256"] == hashlib.sha256(remote(hub, "best.pt")).hexdigest()
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": GOOD_TOKEN}
    again = run_container(image, volume, "-c", INDEPENDENT_VAL, OUTPUT, env=env,
                          options=("--entrypoint", "python"))  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    independent = json.loads(again.stdout.strip().splitlines()[-1])
    for kind in ("mAP50-95", "mAP50", "precision", "recall"):
        assert test[kind] == written["metrics"][f"metrics/{kind}"]
        assert independent[f"metrics/{kind}"] == pytest.approx(test[kind], abs=1e-9), kind
    assert "| test | 8 |" in text
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert "run/evaluation/curves.png" in pictures and len(pictures) >= 3
    assert all(repo.files.get(path, b"").startswith(b"\x89PNG") for path in pictures), pictures
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    predicted = run_container(image, volume, "-c", "mkdir -p /tmp/p && cd /tmp/p && python -c "
                              "'from PIL import Image; Image.open(\"/workspace/data/demo/images/"
                              "test/0000.png\").save(\"image.jpg\")' && python -c \"$SNIPPET\"",
                              env={**env, "SNIPPET": snippet},
                              options=("--entrypoint", "bash"))  # fmt: skip
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert "hf://org/weights/run/best.pt" in snippet and predicted.stdout.strip()
    together = [c for c in repo.commits if "README.md" in repo.changed[c]
                and any(p.endswith(".pt") for p in repo.changed[c])]  # fmt: skip
    assert not together
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"[trainbox] the model card: {hub.url}/{OUTPUT}"


def test_hub_faults_lose_nothing(image: str, volume: str, hub: Hub) -> None:
    # The first commit meets each commit fault once, in a row, and waits 1 + 2 + 4 s (two of
    # each doubled the backoff up to 30 s: 61 s of waiting that showed nothing more).
    hub.faults += [
        Fault("/commit/", status=429, methods=("POST",)),
        Fault("/commit/", status=503, methods=("POST",)),
        Fault("/commit/", status=412, methods=("POST",)),
        Fault("/cas/v1/xorbs/", drop_after=1000, times=2, methods=("POST",)),  # cut midway
        Fault("/preupload/", status=500, times=2, methods=("POST",)),
    ]
    # A card a person gave a license the Hub does not know: the Hub refuses trainbox's card.
    theirs = b"---\nlicense: my-own-licence\n---\nOur words.\n"
    hub.add(OUTPUT, {"README.md": theirs}, kind="models", private=True)
    result = run_container(image, volume, env=env_for(hub, EPOCHS="3"))
    assert result.returncode == 0, logs(result)[-4000:]
    assert all(fault.times == 0 for fault in hub.faults)
    index = json.loads(
        in_volume(image, volume, "cat", "/workspace/trainbox/published/run/index.json")
    )
    assert index["epoch"] == 3  # the final epoch is on the Hub, the card refused or not
    for name, digest in index["files"].items():
        assert hashlib.sha256(remote(hub, name)).hexdigest() == digest, name
    refused = [line for line in result.stderr.splitlines() if "model card was not written" in line]
    assert refused and all("Invalid metadata in README.md" in line for line in refused)
    assert hub.repos[f"models/{OUTPUT}"].files["README.md"] == theirs


def test_a_bad_token_stops_before_training(image: str, volume: str, hub: Hub) -> None:
    result = run_container(image, volume, env=env_for(hub, HF_TOKEN="hf_wrong"))
    assert result.returncode == ExitCode.UPLOAD, logs(result)[-3000:]
    [line] = [m for m in result.stderr.splitlines() if m.startswith("[trainbox] error:")]
    assert "HF_TOKEN" in line and f"OUTPUT_REPO={OUTPUT}" in line
    assert "spawned: 'train'" not in logs(result)


def test_docker_stop_pushes_the_last_epoch_and_a_new_volume_resumes_from_the_hub(
    image: str, volume: str, hub: Hub, tmp_path: Path
) -> None:
    with Webhook() as hook:  # NOTIFY: each event once per run, across the machines too
        _stop_then_resume(image, volume, hub, tmp_path, hook)
    assert hook.titles() == ["trainbox: run is training", "trainbox: run stopped",
                             "trainbox: run completed"], hook.messages  # fmt: skip


def _stop_then_resume(image: str, volume: str, hub: Hub, tmp_path: Path, hook: Webhook) -> None:
    name = f"trainbox-stop-{volume[-8:]}"
    told = {"NOTIFY": hook.url}
    flags = [f for k, v in env_for(hub, EPOCHS="50", **told).items() for f in ("-e", f"{k}={v}")]
    started = docker("run", "-d", "--name", name, "--network", "host", "-v",
                     f"{volume}:/workspace", *flags, image)  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "epoch 2/50 done" not in docker("logs", name).stdout:
            time.sleep(1)
        assert docker("stop", "-t", "120", name).returncode == 0
        code = int(docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout)
        log = docker("logs", name)
    finally:
        docker("rm", "-f", name)
    assert code == ExitCode.INTERRUPTED, (log.stdout + log.stderr)[-4000:]
    assert "final upload done" in log.stdout + log.stderr
    state = json.loads(in_volume(image, volume, "trainbox", "status", "--json"))
    assert (state["phase"], state["exit_code"]) == ("interrupted", ExitCode.INTERRUPTED)
    index = json.loads(
        in_volume(image, volume, "cat", "/workspace/trainbox/published/run/index.json")
    )
    assert index["epoch"] >= 2
    assert hashlib.sha256(remote(hub, "last.pt")).hexdigest() == index["files"]["last.pt"]

    fresh = [f"{volume}-{n}" for n in range(3)]
    try:
        # On other data, the run is refused unless allowed.
        demo.ensure(tmp_path / "shapes")
        archive.pack(tmp_path / "shapes", tmp_path / "shapes.tar")
        hub.add("org/shapes", {"shapes.tar": (tmp_path / "shapes.tar").read_bytes()})
        other = {
            "DATASET_REPO": "org/shapes",
            "DOCTOR": "false",
            "MODEL": "LibreYOLO9t.pt",
            "PRETRAINED": "false",
            "IMGSZ": "128",
            "BATCH": "8",
            "WORKERS": "0",
        }
        changed = run_container(image, fresh[0], env=env_for(hub, EPOCHS="5", **other))
        assert changed.returncode == ExitCode.CONFIG, logs(changed)[-3000:]
        [line] = [m for m in changed.stderr.splitlines() if m.startswith("[trainbox] error:")]
        commit = hub.repos["datasets/org/shapes"].commits[-1][:12]
        assert line.endswith(
            "run 'run' on OUTPUT_REPO was trained on the built-in demo, this container has "
            f"org/shapes@{commit}: set ALLOW_DATASET_CHANGE=true to resume on it, or a new "
            "RUN_NAME"
        )
        # The stopped run's card says so; a person edits it on the Hub meanwhile.
        readme = hub.repos[f"models/{OUTPUT}"].files["README.md"].decode()
        assert "**Not completed: stopped.**" in readme
        edited = readme.replace("<!-- trainbox:begin -->", "Notes by hand.\n\n"
                                "<!-- trainbox:begin -->") + "\nA footer by hand.\n"  # fmt: skip
        hub.repos[f"models/{OUTPUT}"].commit({"README.md": edited.encode()})
        # A brand-new volume continues from the Hub's last.pt, not from epoch 1.
        again = run_container(image, fresh[1], env=env_for(hub, EPOCHS="5", **told))
        assert again.returncode == 0, logs(again)[-4000:]
        assert f"resuming run run from the last.pt on {OUTPUT}" in logs(again)
        assert "epoch 5/5 done" in logs(again) and "epoch 1/5 done" not in logs(again)
        readme = hub.repos[f"models/{OUTPUT}"].files["README.md"].decode()
        assert "Notes by hand." in readme and readme.rstrip().endswith("A footer by hand.")
        assert "Not completed" not in readme and "| test | 8 |" in readme
        # Completed on the Hub: another new volume trains nothing.
        done = run_container(image, fresh[2], env=env_for(hub, EPOCHS="5", **told))
        assert done.returncode == 0, logs(done)[-3000:]
        assert f"already completed on {OUTPUT}: nothing to train" in logs(done)
        assert "spawned: 'train'" not in logs(done)
    finally:
        docker("volume", "rm", "-f", *fresh)


def test_a_torn_checkpoint_resumes_from_the_published_copy(
    image: str, volume: str, hub: Hub
) -> None:
    env = {"DEVICE": "cpu", "EPOCHS": "2"}
    first = run_container(image, volume, env=env)
    assert first.returncode == 0, logs(first)[-3000:]
    # What a kill in the middle of torch.save leaves: a torn last.pt, a run still "running".
    tear = (
        "import json, pathlib; run = pathlib.Path('/workspace/runs/run');"
        "p = run / 'weights/last.pt'; p.write_bytes(p.read_bytes()[:1000]);"
        "s = json.loads((run / 'status.json').read_text()); s['state'] = 'running';"
        "(run / 'status.json').write_text(json.dumps(s))"
    )
    in_volume(image, volume, "python", "-c", tear)
    again = run_container(image, volume, env={**env, "EPOCHS": "3"})
    assert again.returncode == 0, logs(again)[-4000:]
    assert "is torn (killed while saving): resuming from the published copy" in logs(again)
    assert "epoch 3/3 done" in logs(again) and "epoch 1/3 done" not in logs(again)
    status = json.loads(in_volume(image, volume, "cat", "/workspace/runs/run/status.json"))
    assert status["state"] == "completed"  # (its completed_epochs counts this session's only)
    metrics = in_volume(image, volume, "cat", "/workspace/runs/run/metrics.jsonl").splitlines()
    assert [json.loads(row)["epoch"] for row in metrics] == [1, 2, 3]


def test_the_token_is_nowhere(image: str, volume: str, hub: Hub) -> None:
    """Nor NOTIFY's password; a NOTIFY URL at a closed port is one warning line, the run's exit
    stays 0, and it holds the end for less than NOTIFY's timeout."""
    name = f"trainbox-token-{volume[-8:]}"
    closed = f"json://me:n0tify-pw@127.0.0.1:{free_port()}/hook"  # nothing listens there
    env = env_for(hub, EPOCHS="2", NOTIFY=closed)
    flags = [f for k, v in env.items() for f in ("-e", f"{k}={v}")]
    assert (
        docker(
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "-v",
            f"{volume}:/workspace",
            *flags,
            image,
        ).returncode
        == 0
    )
    try:
        deadline = time.monotonic() + 120
        rendered = ""
        while time.monotonic() < deadline and "[program:train]" not in rendered:
            rendered = docker("exec", name, "sh", "-c", "cat /tmp/trainbox-*/*.conf").stdout
            time.sleep(0.5)
        assert "[program:train]" in rendered
        assert docker("wait", name).stdout.strip() == "0"
        log = docker("logs", "--timestamps", name)
    finally:
        docker("rm", "-f", name)
    uploaded = b"".join(data for repo in hub.repos.values() for data in repo.files.values())
    for secret in (GOOD_TOKEN, "n0tify-pw"):
        holding = in_volume(image, volume, "sh", "-c", f"grep -rlF {secret} /workspace; true")
        assert holding == ""
        for where in (rendered, log.stdout, log.stderr):
            assert secret not in where
        assert secret.encode() not in uploaded
    lines = log.stderr.splitlines()
    [card] = [line for line in lines if "the model card:" in line]
    *_, warned = [line for line in lines if "NOTIFY: json://me:****@127.0.0.1" in line]
    assert warned.endswith("the run goes on")  # the end's (the first epoch's may come too)
    held = datetime.fromisoformat(warned.split()[0]) - datetime.fromisoformat(card.split()[0])
    assert held.total_seconds() < 10  # NOTIFY's timeout
    assert hub.repos[f"models/{OUTPUT}"].files  # something was uploaded, and searched
