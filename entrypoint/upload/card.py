"""The model card: ``OUTPUT_REPO``'s ``README.md``, what a person and the Hub read of its runs.

Built with huggingface_hub's ``ModelCard``, ``ModelCardData`` and ``EvalResult``, with
LibreYOLO's conventions (``library_name: libreyolo``, its task to ``pipeline_tag`` mapping,
the tags ``libreyolo``, family, task). trainbox owns only the metadata keys it writes and the
part of the body between its markers: a person's other keys and words stay as they were, and a
README it did not write gets the section added. Each run of the repo is one record, kept in
the section itself (a comment), so that the next run's card lists every run without asking the
Hub for more than the README; the newest completed run is described in full on top.
"""

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from entrypoint.settings import config as settings
from entrypoint.settings.launchers import Volume
from entrypoint.state import store
from entrypoint.training import evaluation

BEGIN, END = "<!-- trainbox:begin -->", "<!-- trainbox:end -->"
RECORDS = re.compile(r"<!-- trainbox:runs (.*?) -->", re.S)
# LibreYOLO's task -> pipeline_tag (libreyolo/utils/hf_hub.py, _PIPELINE_TAGS), read there.
SPLIT_NAMES = {"test": "test", "val": "validation"}
HARDWARE = ("gpus", "driver", "cuda", "torch", "libreyolo", "trainbox")
HIDDEN_SETTINGS = {"workspace", "train", "ssh_public_key", "node_rank", "master_addr", "image",
                   "model_license"}  # fmt: skip


def pipeline_tag(task: str) -> str | None:
    from libreyolo.utils.hf_hub import _PIPELINE_TAGS

    return _PIPELINE_TAGS.get(task)


def _classes(data: str | None) -> list[str]:
    """The class names of the data training read: a data.yaml's ``names``, a classification
    root's sorted folders (LibreYOLO numbers them so)."""
    if not data:
        return []
    path = Path(data)
    if path.is_dir():
        return sorted(p.name for p in (path / "train").iterdir() if p.is_dir()) if (
            path / "train").is_dir() else []  # fmt: skip
    try:
        names = (yaml.safe_load(path.read_text()) or {}).get("names") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    return [str(v) for _, v in sorted(names.items())] if isinstance(names, dict) else [
        str(n) for n in names]  # fmt: skip


def record(run_dir: Path, volume: Volume, ended: str = "") -> dict:
    """One run's record for the card, from the volume, read first: its evaluation, LibreYOLO's
    status and train_config, the run's manifest (versions, hardware, dataset, settings), and
    when the container's status is about this run, its cost and the GPUs' energy in training
    (the status's ``cost`` and ``gpu_energy``, when known). ``ended``: how trainbox saw the
    container end, when LibreYOLO's word is not the whole story (a stop is its ``failed``)."""
    evaluated = store.evaluations(run_dir / evaluation.FOLDER)
    published = store.published_folder(run_dir.parent.parent, run_dir.name)
    theirs, manifest = store.libreyolo_status(run_dir), store.manifest(published)
    trained = store.libreyolo_train_config(run_dir)
    state = store.status(volume)
    cost, energy = (state.get("cost"), state.get("gpu_energy")) if state.get(
        "run") == run_dir.name else (None, None)  # fmt: skip
    chosen = manifest.get("settings", {})
    task = theirs.get("task", "detect")
    kept = (*evaluation.headline(task), "metrics/best_conf")  # the files keep every metric
    scores = {split: {"images": found["images"], "checkpoint_sha256": found["checkpoint_sha256"],
                      "metrics": {k: v for k, v in found["metrics"].items() if k in kept}}
              for split, found in evaluated.items()}  # fmt: skip
    found = {
        "name": run_dir.name,
        "state": _state(theirs.get("state", "not started"), ended),
        "model": chosen.get("model", ""),
        "family": theirs.get("model_family", ""),
        "size": theirs.get("model_size", ""),
        "task": task,
        "classes": _classes(trained.get("data")),
        "imgsz": chosen.get("imgsz") or trained.get("imgsz"),
        "epochs": theirs.get("completed_epochs", 0),
        "total_epochs": theirs.get("total_epochs"),
        "best_epoch": theirs.get("best_epoch"),
        "batch": trained.get("batch"),
        "dataset": manifest.get("dataset") or {},
        "scores": scores,
        "hardware": {key: manifest.get(key) for key in HARDWARE},
        "training_hours": round(float(theirs.get("total_seconds") or 0) / 3600, 4),
        "options": manifest.get("train_options", {}),
        "settings": _changed(chosen),
        "image": chosen.get("image", ""),
        "license": chosen.get("model_license", ""),
        "curves": (run_dir / evaluation.FOLDER / evaluation.CURVES).is_file(),
        "plots": {split: _plots(run_dir / evaluation.FOLDER / split) for split in scores},
        "date": (theirs.get("updated_at") or "")[:10],
    }
    if cost and "spent" in cost:
        found["cost"] = {"usd": cost["spent"], "per_hour": cost.get("per_hour")}
    if energy and "joules" in energy:
        found["energy_kwh"] = round(energy["joules"] / 3.6e6, 4)
    return found


def _state(theirs: str, ended: str) -> str:
    """The run's state on the card: LibreYOLO's, but a stop or a budget that interrupted it
    is said as such (LibreYOLO records an interruption as ``failed``)."""
    if theirs == "completed" or not ended or ended == "completed":
        return theirs
    return {"interrupted": "stopped", "budget": "stopped at MAX_COST"}.get(ended, ended)


def _plots(folder: Path) -> list[str]:
    """LibreYOLO's pictures of one split's evaluation (confusion matrix, PR curves, ...)."""
    return sorted(p.name for p in (folder / "plots").glob("*.png"))


def _changed(chosen: dict[str, str]) -> dict[str, str]:
    """The settings that differ from their defaults: the ones a run line must give."""
    return {k: v for k, v in chosen.items() if k not in HIDDEN_SETTINGS and v != _default(k)}


def _default(key: str) -> str | None:
    """A setting's default as the manifest writes settings (a string)."""
    for each in fields(settings.Config):
        if each.name == key and not callable(each.default_factory):  # type: ignore[arg-type]
            return str(each.default)
    return None


# -- The card's records, kept in its own section ----------------------------------------------


def records_of(text: str | None) -> list[dict]:
    """The run records a card trainbox wrote holds ([] for any other text)."""
    found = RECORDS.search(text or "")
    if not found:
        return []
    try:
        loaded = json.loads(found.group(1))
    except ValueError:
        return []
    return [r for r in loaded if isinstance(r, dict) and r.get("name")] if isinstance(
        loaded, list) else []  # fmt: skip


def _hidden(records: list[dict]) -> str:
    """The records as an HTML comment: JSON, whose only ``--`` can be inside a string,
    escaped there (a comment cannot hold ``--``)."""
    text = json.dumps(records, separators=(",", ":"), sort_keys=True).replace("--", "-\\u002d")
    return f"<!-- trainbox:runs {text} -->"


def merged(records: list[dict], mine: dict) -> list[dict]:
    """The repo's runs with this one's record replaced or added, newest last."""
    return [*(r for r in records if r["name"] != mine["name"]), mine]


# -- Rendering ---------------------------------------------------------------------------------


def render(mine: list[dict], repo: str, existing: str | None = None) -> str:
    """The README for ``repo`` once ``mine`` (these runs' records, oldest first) are in it:
    ``existing`` (the README the repo holds, or None) keeps every key and word trainbox does
    not own, and the records of the repo's other runs."""
    from huggingface_hub import ModelCard

    runs = records_of(existing)
    for each in mine:
        runs = merged(runs, each)
    person_keys, person_body = _split(existing)
    section = "\n".join([BEGIN, _hidden(runs), _body(runs, repo), END])
    if BEGIN in person_body and END in person_body:
        head, rest = person_body.split(BEGIN, 1)
        body = head + section + rest.split(END, 1)[1]
    elif person_body.strip():
        body = person_body.rstrip() + "\n\n" + section + "\n"
    else:
        body = section + "\n"
    # Parsed from the person's keys first, so that their order stays; trainbox's are set next.
    kept = {k: v for k, v in person_keys.items() if k != "model-index"}
    card = ModelCard(f"---\n{yaml.safe_dump(kept, sort_keys=False)}---\n{body}",
                     ignore_metadata_errors=True)  # fmt: skip
    card.data = _metadata(runs, person_keys)
    return str(card)


def _split(text: str | None) -> tuple[dict[str, Any], str]:
    """(the metadata a README holds, its body)."""
    if not text:
        return {}, ""
    from huggingface_hub.repocard import REGEX_YAML_BLOCK  # the Hub server's own, it says

    found = REGEX_YAML_BLOCK.search(text)
    if not found:
        return {}, text
    try:
        keys = yaml.safe_load(found.group(2)) or {}
    except yaml.YAMLError:
        keys = {}
    return (keys if isinstance(keys, dict) else {}), text[found.end() :]


def _metadata(runs: list[dict], kept: dict[str, Any]) -> Any:
    """The card's metadata: a person's keys, with trainbox's own (library_name, pipeline_tag,
    tags and datasets added to, base_model, one model-index entry per run) over them."""
    from huggingface_hub import ModelCardData

    top = _newest(runs)
    tags = list(dict.fromkeys([*(kept.get("tags") or []), "libreyolo", top["family"],
                               top["task"], "trainbox"]))  # fmt: skip
    datasets = list(dict.fromkeys([*(kept.get("datasets") or []),
                                   *(r["dataset"]["repo"] for r in runs
                                     if r["dataset"].get("repo"))]))  # fmt: skip
    ours = {r["name"] for r in runs}
    others = [e for e in kept.get("model-index") or []
              if isinstance(e, dict) and e.get("name") not in ours]  # fmt: skip
    keys = {k: v for k, v in kept.items() if k not in ("model-index", "tags", "datasets")}
    keys |= {"library_name": "libreyolo", "tags": [t for t in tags if t]}
    if tag := pipeline_tag(top["task"]):
        keys["pipeline_tag"] = tag
    if datasets:
        keys["datasets"] = datasets
    if base := _base_model(top["model"]):
        keys["base_model"] = base
    if top.get("license"):
        keys["license"] = top["license"]
    data = ModelCardData(**keys)
    entries = others + [entry for run in runs for entry in _model_index(run)]
    if entries:
        setattr(data, "model-index", entries)  # one entry per run: ModelCardData keeps one
    return data


def _model_index(run: dict) -> list[dict]:
    """A run's model-index entry, built by huggingface_hub from its EvalResults ([] without
    a score)."""
    from huggingface_hub import EvalResult
    from huggingface_hub.repocard_data import eval_results_to_model_index

    task, dataset = pipeline_tag(run["task"]) or run["task"], run["dataset"]
    name = dataset.get("repo") or dataset.get("data") or "local"
    results = [
        EvalResult(task_type=task, dataset_type=name, dataset_name=name,
                   dataset_split=SPLIT_NAMES[split], dataset_revision=dataset.get("commit"),
                   metric_type=key.removeprefix("metrics/"),
                   metric_name=f"{SPLIT_NAMES[split]} {key.removeprefix('metrics/')}",
                   metric_value=score["metrics"][key])
        for split, score in sorted(run["scores"].items())
        for key in evaluation.headline(run["task"]) if key in score["metrics"]
    ]  # fmt: skip
    return eval_results_to_model_index(run["name"], results) if results else []


def _base_model(model: str) -> str | None:
    """The Hub repo the start weights came from (``hf://ORG/NAME/...``)."""
    if model.startswith("hf://"):
        parts = model.removeprefix("hf://").split("/")
        return "/".join(parts[:2]).split("@")[0] if len(parts) >= 2 else None
    return None


def _newest(runs: list[dict]) -> dict:
    """The run described in full: the newest completed one, else the newest."""
    done = [r for r in runs if r["state"] == "completed"]
    return (done or runs)[-1]


def load_line(repo: str, run: dict) -> str:
    return f'model = LibreYOLO("hf://{repo}/{run["name"]}/best.pt")'


def snippet(repo: str, run: dict) -> str:
    """The Python that loads the run's best.pt from the Hub and predicts (a test runs it)."""
    conf = _conf(run)
    return "\n".join(["from libreyolo import LibreYOLO", "", load_line(repo, run),
                      f'results = model.predict("image.jpg"{f", conf={conf}" if conf else ""})',
                      "print(results)"])  # fmt: skip


def _conf(run: dict) -> float | None:
    """LibreYOLO's F1-optimal confidence on the validation split (detection), rounded."""
    value = run["scores"].get("val", {}).get("metrics", {}).get("metrics/best_conf")
    return round(value, 3) if value else None


def _body(runs: list[dict], repo: str) -> str:
    top = _newest(runs)
    parts = [_about(top, repo), _scores(top), _usage(top, repo), _pictures(top),
             _training(top), _where(top), _reproduce(top)]  # fmt: skip
    if len(runs) > 1:
        parts.append(_runs(runs))
    return "\n\n".join(p for p in parts if p)


def _about(run: dict, repo: str) -> str:
    model = f"{run['family']}{run['size']}" or run["model"]
    dataset = run["dataset"]
    where = (f"[{dataset['repo']}](https://huggingface.co/datasets/{dataset['repo']})"
             if dataset.get("repo") else f"`{dataset.get('data', 'a local dataset')}`")  # fmt: skip
    classes = run["classes"]
    shown = ", ".join(classes[:50]) + (", ..." if len(classes) > 50 else "")
    state = "" if run["state"] == "completed" else f" **Not completed: {run['state']}.**"
    return (f"# {model} ({run['task']}), run `{run['name']}`\n\n"
            f"LibreYOLO `{model}` for {run['task']}, trained by trainbox on {where} for "
            f"{run['epochs']} of {run['total_epochs']} epochs at image size {run['imgsz']}."
            f"{state}\n\n{len(classes)} classes: {shown or 'unknown'}.")  # fmt: skip


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _scores(run: dict) -> str:
    keys, scores = evaluation.headline(run["task"]), run["scores"]
    if not scores:
        return ("## Scores\n\nNo evaluation of `best.pt` yet (it comes once training has "
                "completed; `EVALUATE=none` skips it).")  # fmt: skip
    rows = ["| Split | Images | " + " | ".join(k.removeprefix("metrics/") for k in keys) + " |",
            "|---|---|" + "---|" * len(keys)]  # fmt: skip
    for split in ("test", "val"):
        if found := scores.get(split):
            label = "test" if split == "test" else "validation (it chose best.pt)"
            rows.append(
                f"| {label} | {found['images']} | "
                + " | ".join(_fmt(found["metrics"].get(k, "")) for k in keys)
                + " |"
            )
    note = ("The test split never chose anything: its score is the one to trust."
            if "test" in scores else "The dataset has no test split: these are validation "
            "scores, on the split that chose `best.pt`, so they lean high.")  # fmt: skip
    if conf := _conf(run):
        note += (f"\n\nDeploy with `conf={conf}`: LibreYOLO's F1-optimal confidence on the "
                 "validation split (`metrics/best_conf`).")  # fmt: skip
    return "## Scores\n\n" + "\n".join(rows) + "\n\n" + note


def _usage(run: dict, repo: str) -> str:
    return ("## Use it\n\n```python\n" + snippet(repo, run) + "\n```\n\n"
            "A private repo needs `HF_TOKEN` in the environment.")  # fmt: skip


def pictures(run: dict) -> list[tuple[str, str]]:
    """(caption, path in the repo) of each picture the card shows: only files the run
    uploaded (the evaluation's)."""
    shown = []
    if run.get("curves"):
        shown.append(("training curves", f"{run['name']}/{evaluation.FOLDER}/{evaluation.CURVES}"))
    for split in ("test", "val"):
        for name in run.get("plots", {}).get(split, []):
            shown.append(
                (
                    f"{SPLIT_NAMES[split]}: {Path(name).stem.replace('_', ' ')}",
                    f"{run['name']}/{evaluation.FOLDER}/{split}/plots/{name}",
                )
            )
    return shown


def _pictures(run: dict) -> str:
    shown = pictures(run)
    return "## Pictures\n\n" + "\n\n".join(f"![{c}]({p})" for c, p in shown) if shown else ""


def _training(run: dict) -> str:
    options = ", ".join(f"`{k}={v}`" for k, v in sorted(run["options"].items())) or "defaults"
    start = run["model"] + ("" if run["settings"].get("pretrained") != "False"
                            else " (from scratch)")  # fmt: skip
    return (f"## How it was trained\n\n| | |\n|---|---|\n| start | `{start}` |\n"
            f"| epochs | {run['epochs']} (best: {run['best_epoch']}) |\n"
            f"| batch | {run['batch']} |\n| image size | {run['imgsz']} |\n"
            f"| options | {options} |")  # fmt: skip


def _where(run: dict) -> str:
    hw = run["hardware"]
    gpus = hw.get("gpus") or []
    card = f"{len(gpus)} x {gpus[0]}" if gpus else "CPU"
    cost = run.get("cost")
    money = f"${cost['usd']:.2f} at ${cost['per_hour']:.3f}/h" if cost else "no price known"
    return (f"## Where and at what cost\n\n| | |\n|---|---|\n| hardware | {card} |\n"
            f"| driver, CUDA | {hw.get('driver') or '-'}, {hw.get('cuda') or '-'} |\n"
            f"| torch, LibreYOLO, trainbox | {hw.get('torch')}, {hw.get('libreyolo')}, "
            f"{hw.get('trainbox')} |\n| training hours | {run['training_hours']:.2f} |\n"
            f"| cost | {money} |" + _energy(run))  # fmt: skip


def _energy(run: dict) -> str:
    """The GPUs' energy in training, as NVML counted it; nothing where it did not."""
    kwh = run.get("energy_kwh")
    return f"\n| GPU energy (NVML) | {kwh:.3f} kWh |" if kwh is not None else ""


def _reproduce(run: dict) -> str:
    image = run["image"] or f"YOUR_REGISTRY/trainbox:{run['hardware'].get('trainbox')}"
    flags = " ".join(f"-e {k.upper()}={v}" for k, v in sorted(run["settings"].items()))
    return ("## Reproduce it\n\n```sh\ndocker run --gpus all --shm-size 16g -v "
            f"trainbox:/workspace -e HF_TOKEN {flags} {image}\n```")  # fmt: skip


def _runs(runs: list[dict]) -> str:
    rows = ["## Runs in this repo", "", "| Run | Model | Dataset | Epochs | Test | Validation "
            "| Cost | Date | State |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in reversed(runs):
        first = evaluation.headline(run["task"])[0]
        test, val = (run["scores"].get(s, {}).get("metrics", {}).get(first)
                     for s in ("test", "val"))  # fmt: skip
        cost = f"${run['cost']['usd']:.2f}" if run.get("cost") else "-"
        data = run["dataset"].get("repo") or run["dataset"].get("data", "-")
        rows.append(f"| {run['name']} | {run['model']} | {data} | {run['epochs']} | "
                    f"{_fmt(test) if test is not None else '-'} | "
                    f"{_fmt(val) if val is not None else '-'} | {cost} | {run['date']} | "
                    f"{run['state']} |")  # fmt: skip
    return "\n".join(rows) + f"\n\nScores: {first.removeprefix('metrics/')} of each run's best.pt."


def volume_records(workspace: Path) -> list[dict]:
    """The records of every run on a volume, the oldest first; the status's cost and energy go
    to the run it is about."""
    runs = [d for d in sorted((workspace / "runs").glob("*"))
            if store.libreyolo_status(d)]  # fmt: skip
    found = [record(d, Volume(workspace, 0)) for d in runs]
    return sorted(found, key=lambda r: r["date"])
