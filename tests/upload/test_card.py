"""The model card from fixture run folders: what LibreYOLO and trainbox leave on a volume
(LibreYOLO's status.json and train_config.yaml, the run's manifest, its evaluation files),
read back with huggingface_hub's own ModelCard parser. Every number is checked against the
evaluation file it came from; the Hub's refusal and a person's edits against the test Hub."""

import json
import re
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from entrypoint.training import evaluation
from entrypoint.upload import card, results
from tests.conftest import client_at
from tests.standins.hub import GOOD_TOKEN, Hub, card_errors

REPO = "org/weights"
DETECT = {"metrics/mAP50-95": 0.4123, "metrics/mAP50": 0.6871, "metrics/precision": 0.7012,
          "metrics/recall": 0.5533, "metrics/best_conf": 0.3172, "metrics/AR100": 0.5,
          "speed/images_seen": 12.0}  # fmt: skip
CLASSIFY = {"metrics/accuracy_top1": 0.8125, "metrics/accuracy_top5": 1.0,
            "metrics/precision": 0.79, "metrics/recall": 0.8, "fitness": 0.8125}  # fmt: skip


def make_run(workspace: Path, name: str, *, task: str = "detect", state: str = "completed",
             scores: dict[str, dict] | None = None, date: str = "2026-12-05") -> Path:  # fmt: skip
    """A run folder as a trainbox run leaves it: LibreYOLO's files, the published manifest,
    the evaluation (``scores``: split -> metrics)."""
    run_dir = workspace / "runs" / name
    (run_dir / "weights").mkdir(parents=True)
    data = workspace / "data" / "set"
    if task == "classify":
        for cls in ("dog", "cat"):
            (data / "train" / cls).mkdir(parents=True, exist_ok=True)
        data_ref = str(data)
    else:
        data.mkdir(parents=True, exist_ok=True)
        (data / "data.yaml").write_text(yaml.safe_dump({"names": {0: "car", 1: "person"}}))
        data_ref = str(data / "data.yaml")
    family = ("convnext", "t") if task == "classify" else ("yolo9", "t")
    (run_dir / "status.json").write_text(
        json.dumps(
            {
                "state": state,
                "task": task,
                "model_family": family[0],
                "model_size": family[1],
                "completed_epochs": 3 if state == "completed" else 1,
                "total_epochs": 3,
                "best_epoch": 2,
                "total_seconds": 5400.0,
                "updated_at": f"{date}T10:00:00+00:00",
            }
        )
    )
    (run_dir / "train_config.yaml").write_text(yaml.safe_dump({"data": data_ref, "batch": 16,
                                                               "imgsz": 640}))  # fmt: skip
    store.write_manifest(store.published_folder(workspace, name), {
        "run": name, "trainbox": "0.1.0", "libreyolo": "1.6.0", "torch": "2.14.1+cu130",
        "cuda": "13.0", "driver": "580.65", "gpus": ["NVIDIA H100 80GB HBM3"],
        "dataset": {"repo": "org/cars", "revision": "main", "commit": "c0ffee12"},
        "train_options": {"lr0": 0.002},
        "settings": {"model": "hf://org/base/best.pt", "epochs": "3", "run_name": name,
                     "dataset_repo": "org/cars", "workspace": str(workspace),
                     "model_license": "apache-2.0"},
    })  # fmt: skip
    for split, metrics in (scores or {}).items():
        found = {
            "split": split,
            "images": 12 if split == "test" else 10,
            "metrics": metrics,
            "checkpoint_sha256": "ab" * 32,
            "dataset": {"repo": "org/cars"},
            "seconds": 3.2,
        }
        store.write_evaluation(run_dir / evaluation.FOLDER, split, found)
        plots = run_dir / evaluation.FOLDER / split / "plots"
        plots.mkdir(parents=True)
        (plots / "confusion_matrix.png").write_bytes(b"\x89PNG picture")
    return run_dir


def record(run_dir: Path, **cost: float) -> dict:
    """The run's record, with ``spent`` dollars in the container's status (the status is
    about this run) when given."""
    volume = Volume(run_dir.parents[1], 0)
    about = (
        {"run": run_dir.name, "cost": {"spent": cost["spent"], "per_hour": 2.49}} if cost else {}
    )
    store.update_status(volume, lambda _: about)
    return card.record(run_dir, volume)


def model_index(text: str) -> list[dict]:
    parsed = ModelCard(text)  # huggingface_hub's own parser
    assert parsed.data.library_name == "libreyolo"
    return yaml.safe_load(text.split("---\n")[1])["model-index"]


def metric(index: list[dict], run: str, split: str, kind: str) -> float:
    entry = next(e for e in index if e["name"] == run)
    found = [m["value"] for r in entry["results"] if r["dataset"]["split"] == split
             for m in r["metrics"] if m["type"] == kind]  # fmt: skip
    assert len(found) == 1, (run, split, kind)
    return found[0]


def test_a_detection_runs_card_reports_its_evaluation_exactly(tmp_path: Path) -> None:
    run_dir = make_run(
        tmp_path, "run", scores={"test": DETECT, "val": {**DETECT, "metrics/mAP50-95": 0.5}}
    )
    text = card.render([record(run_dir, spent=12.34)], REPO)
    assert not card_errors(text)  # what the Hub checks of the metadata
    meta = ModelCard(text).data.to_dict()
    assert meta["pipeline_tag"] == "object-detection"  # LibreYOLO's own mapping
    assert {"libreyolo", "yolo9", "detect", "trainbox"} <= set(meta["tags"])
    assert meta["datasets"] == ["org/cars"] and meta["base_model"] == "org/base"
    assert meta["license"] == "apache-2.0"  # MODEL_LICENSE
    index = model_index(text)
    for split, name in (("test", "test"), ("val", "validation")):
        written = json.loads((run_dir / "evaluation" / f"{split}.json").read_text())["metrics"]
        for kind in ("mAP50-95", "mAP50", "precision", "recall"):
            assert metric(index, "run", name, kind) == written[f"metrics/{kind}"]
    entry = index[0]["results"][0]["dataset"]
    assert entry["type"] == "org/cars" and entry["revision"] == "c0ffee12"
    assert "| test | 12 | 0.4123 | 0.6871 | 0.7012 | 0.5533 |" in text
    assert "conf=0.317" in text and "$12.34 at $2.490/h" in text
    assert "1 x NVIDIA H100 80GB HBM3" in text and "580.65, 13.0" in text
    assert "2 classes: car, person" in text
    assert "![test: confusion matrix](run/evaluation/test/plots/confusion_matrix.png)" in text
    assert "-e DATASET_REPO=org/cars" in text and "WORKSPACE" not in text.split("```sh")[1]
    assert 'model = LibreYOLO("hf://org/weights/run/best.pt")' in text
    assert card.snippet(REPO, record(run_dir)) in text  # what a test runs, as printed
    assert "GPU energy" not in text  # no NVML figure: none made up


def test_the_gpus_energy_is_on_the_card_where_nvml_counted_it(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "run", scores={"val": DETECT})
    volume = Volume(run_dir.parents[1], 0)
    store.update_status(volume, lambda _: {"run": "run", "gpu_energy": {"joules": 9e6, "gpus": 1}})
    mine = card.record(run_dir, volume)
    assert mine["energy_kwh"] == 2.5  # 9 MJ / 3.6 MJ per kWh
    assert "| GPU energy (NVML) | 2.500 kWh |" in card.render([mine], REPO)


def test_a_classifier_carries_top1_and_no_detection_metric(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "cls", task="classify", scores={"val": CLASSIFY})
    text = card.render([record(run_dir)], REPO)
    assert ModelCard(text).data.pipeline_tag == "image-classification"
    index = model_index(text)
    assert metric(index, "cls", "validation", "accuracy_top1") == 0.8125
    assert metric(index, "cls", "validation", "accuracy_top5") == 1.0
    assert "mAP50" not in text and "2 classes: cat, dog" in text  # LibreYOLO sorts the folders
    assert "has no test split" in text  # a validation score is never called a test score
    assert not [r for e in index for r in e["results"] if r["dataset"]["split"] == "test"]


def test_a_failed_run_says_so_and_claims_no_score(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "bad", state="failed")
    text = card.render([record(run_dir)], REPO)
    assert "**Not completed: failed.**" in text and "No evaluation of `best.pt` yet" in text
    assert "model-index" not in ModelCard(text).data.to_dict()
    assert not card_errors(text)


def test_two_runs_the_newest_completed_on_top_every_run_in_the_table(tmp_path: Path) -> None:
    first = make_run(tmp_path, "first", scores={"val": DETECT}, date="2026-12-01")
    second = make_run(tmp_path, "second", scores={"test": {**DETECT, "metrics/mAP50-95": 0.6}},
                      date="2026-12-04")  # fmt: skip
    failed = make_run(tmp_path, "third--try", state="failed", date="2026-12-05")
    once = card.render([record(first)], REPO)
    # a later run on another volume adds its own; the card keeps the earlier run's record
    text = card.render([record(second, spent=3.0)], REPO, once)
    text = card.render([record(failed)], REPO, text)
    assert card.records_of(text)[0]["name"] == "first"  # a name with "--" survives the comment
    assert [r["name"] for r in card.records_of(text)] == ["first", "second", "third--try"]
    assert text.index("# yolo9t (detect), run `second`") < text.index("## Runs in this repo")
    table = text.split("## Runs in this repo")[1]
    assert table.index("| third--try |") < table.index("| second |") < table.index("| first |")
    assert "| second | hf://org/base/best.pt | org/cars | 3 | 0.6000 | - | $3.00 |" in table
    index = model_index(text)
    assert [e["name"] for e in index] == ["first", "second"]  # one entry per scored run
    assert metric(index, "second", "test", "mAP50-95") == 0.6
    assert card.volume_records(tmp_path)[-1]["name"] == "third--try"  # `trainbox card`
    record(second, spent=3.0)  # the status is about `second`: its cost goes to it alone
    costs = {r["name"]: r.get("cost") for r in card.volume_records(tmp_path)}
    assert costs == {"first": None, "second": {"usd": 3.0, "per_hour": 2.49}, "third--try": None}


def test_a_persons_words_and_keys_are_kept(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "run", scores={"val": DETECT})
    theirs = ("---\nlicense: mit\ntags:\n- cars\nmodel-index:\n- name: baseline\n  results:\n"
              "  - task: {type: object-detection}\n    dataset: {type: org/cars, name: cars}\n"
              "    metrics:\n    - {type: mAP50-95, value: 0.3}\n---\n"
              "# Car detector\n\nOur notes -- keep them.\n")  # fmt: skip
    text = card.render([record(run_dir)], REPO, theirs)  # a README trainbox did not write
    assert text.split(card.BEGIN)[0].endswith("Our notes -- keep them.\n\n")
    meta = ModelCard(text).data.to_dict()
    assert meta["license"] == "apache-2.0" and meta["tags"][0] == "cars"  # MODEL_LICENSE's
    assert [e["name"] for e in model_index(text)] == ["baseline", "run"]
    edited = text.replace("Our notes -- keep them.", "Edited by hand.") + "\nA footer.\n"
    again = card.render([record(run_dir)], REPO, edited)  # a later run's card
    assert "Edited by hand." in again and again.rstrip().endswith("A footer.")
    assert again.count(card.BEGIN) == 1 and again.count("## Scores") == 1


def test_a_card_the_hub_refuses_is_one_line_and_nothing_else(
    tmp_path: Path, hub: Hub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Hub checks the metadata (huggingface_hub asks /api/validate-yaml, then commits):
    a person's invalid license is refused, said in one warning line with the Hub's words."""
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    client_at(monkeypatch, hub.url)
    hub.add(REPO, {"README.md": b"---\nlicense: my-own\n---\nMine.\n"}, kind="models")
    run_dir = make_run(tmp_path, "run", scores={"val": DETECT})
    mine = {**record(run_dir), "license": ""}  # no MODEL_LICENSE: the person's key stays
    assert results.push_card(REPO, [mine], wait=5) is None
    refused = [r.getMessage() for r in caplog.records if "model card" in r.getMessage()]
    assert len(refused) == 1 and "\n" not in refused[0]
    assert "Invalid metadata in README.md" in refused[0] and "license" in refused[0]
    assert hub.repos[f"models/{REPO}"].files["README.md"].endswith(b"Mine.\n")
    hub.repos[f"models/{REPO}"].commit({"README.md": b"---\nlicense: mit\n---\nMine.\n"})
    page = results.push_card(REPO, [mine], wait=5)
    assert page == f"{hub.url}/{REPO}"
    written = hub.repos[f"models/{REPO}"].files["README.md"].decode()
    assert written.startswith("---\nlicense: mit\n") and "Mine.\n" in written
    assert re.search(r"value: 0\.4123\b", written)
    commits = len(hub.repos[f"models/{REPO}"].commits)
    assert results.push_card(REPO, [mine], wait=5) == page
    assert len(hub.repos[f"models/{REPO}"].commits) == commits  # unchanged: not committed again
    # The end's own record rides with the card: an unchanged card still commits it, alone.
    also = {"run/notified.json": b'{"completed": "2026-12-07T03:00:00Z"}'}
    assert results.push_card(REPO, [mine], wait=5, also=also) == page
    held = hub.repos[f"models/{REPO}"]
    assert len(held.commits) == commits + 1 and held.files["run/notified.json"] == also[
        "run/notified.json"]  # fmt: skip
    assert held.files["README.md"].decode() == written
