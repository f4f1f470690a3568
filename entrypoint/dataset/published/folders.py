"""Datasets published as folders of files, fetched into ``.fetch/``, made into what LibreYOLO
reads: a YOLO folder (its ``data.yaml`` mended), a COCO folder (its JSON made into YOLO labels),
an ImageFolder (class folders), or a zip of one of these (a Roboflow export).

Roboflow's exports (read 2026-12-05 in exports people publish): ``train/ valid/ test/``, each
with ``images/`` and ``labels/`` (YOLO) or the images and ``_annotations.coco.json`` (COCO); the
YOLO ``data.yaml`` says ``train: ../train/images``, a path that is wrong from the yaml's own
folder, and often a ``test:`` that does not exist; the COCO categories start with a placeholder
named after the project, which no box uses and whose name is every other's supercategory.
"""

import json
import logging
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import yaml

from entrypoint.dataset import forms
from entrypoint.dataset.published import images, layout
from entrypoint.errors import ExitCode, TrainboxError
from entrypoint.files import write_atomic

log = logging.getLogger("trainbox")


def convert(form: str, fetched: Path, root: Path, *, fraction: float, forced_box: str) -> Path:
    """Make the files in ``fetched`` (as published) into ``root``; return what training reads."""
    if form == "archive":
        form, fetched = _unpack(fetched)
    if form == "yolo":
        return _yolo(fetched, root, fraction)
    if form == "coco":
        return _coco(fetched, root, fraction, forced_box)
    if form == "imagefolder":
        return _imagefolder(fetched, root, fraction)
    raise TrainboxError(f"a {form} dataset cannot be converted", ExitCode.DATASET)


def _published(folder: Path, pattern: str = "*") -> list[Path]:
    """The files under ``folder`` whose names match ``pattern``, sorted, without the Hub
    client's notes of what it fetched (``.cache/`` inside ``folder``)."""
    return sorted(p for p in folder.rglob(pattern)
                  if p.is_file() and ".cache" not in p.relative_to(folder).parts)  # fmt: skip


def _files(folder: Path) -> list[str]:
    return [str(p.relative_to(folder)) for p in _published(folder)]


def _unpack(fetched: Path) -> tuple[str, Path]:
    """Extract the one zip or tar, refusing members that leave the folder, links and devices;
    the form of what it holds."""
    [packed] = [p for p in _published(fetched) if p.name.lower().endswith(forms.ARCHIVES)]
    out = fetched / "unpacked"
    try:
        if packed.name.lower().endswith(".zip"):
            _extract_zip(packed, out)
        else:
            _extract_tar(packed, out)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as err:
        if isinstance(err, OSError) and not isinstance(err, EOFError) and err.errno:
            raise
        raise TrainboxError(f"{packed.name}: not a readable zip or tar ({err}); export the "
                            "dataset again", ExitCode.DATASET) from None  # fmt: skip
    packed.unlink()  # the archive's room goes back as soon as its files are out
    found = forms.found("", _files(out))
    inner = [form for form in ("yolo", "coco", "imagefolder") if form in found]
    if not inner:
        raise TrainboxError(
            f"{packed.name} holds no YOLO, COCO or ImageFolder dataset ({forms.few(_files(out))})",
            ExitCode.DATASET,
        )
    return inner[0], out


def _room(packed: Path, declared: int) -> None:
    free = shutil.disk_usage(packed.parent).free
    if declared > free:
        raise TrainboxError(
            f"{packed.name} declares {declared / 1e9:.2f} GB of files and {free / 1e9:.2f} GB "
            "is free; give the volume more space",
            ExitCode.DISK,
        )


def _refuse(packed: Path, name: str, why: str) -> TrainboxError:
    return TrainboxError(f"{packed.name}: member {name!r} {why}; export the dataset again",
                         ExitCode.DATASET)  # fmt: skip


def _leaves(name: str) -> bool:
    path = PurePosixPath(name)
    return path.is_absolute() or ".." in path.parts


def _extract_zip(packed: Path, out: Path) -> None:
    with zipfile.ZipFile(packed) as zipped:
        _room(packed, sum(info.file_size for info in zipped.infolist()))
        for info in zipped.infolist():
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise _refuse(packed, info.filename, "is a link")
            if _leaves(info.filename):
                raise _refuse(packed, info.filename, "leaves its folder")
        zipped.extractall(out)


def _extract_tar(packed: Path, out: Path) -> None:
    """Only files and folders, inside ``out`` (a tar export is not a trainbox pack: it is
    stored, then extracted, not streamed)."""
    with tarfile.open(packed) as tar:
        members = tar.getmembers()
        _room(packed, sum(m.size for m in members))
        for member in members:
            if not (member.isfile() or member.isdir()):
                raise _refuse(packed, member.name, "is a link or a device")
            if _leaves(member.name):
                raise _refuse(packed, member.name, "leaves its folder")
            member.mode = 0o755 if member.isdir() else 0o644
            member.uid = member.gid = 0
            member.uname = member.gname = ""
        tar.extractall(out, members=members)


def _yolo(fetched: Path, root: Path, fraction: float) -> Path:
    """Keep the files as published; write a data.yaml that points at them."""
    [found] = sorted(_published(fetched, "data.y*ml"), key=lambda p: len(p.parts))[:1]
    spec = yaml.safe_load(found.read_text()) or {}
    if not isinstance(spec, dict) or "names" not in spec:
        raise TrainboxError(f"{found.name}: not a YOLO data.yaml (no names)", ExitCode.DATASET)
    base = root / "files"
    shutil.move(found.parent, base)
    shutil.rmtree(base / ".cache", ignore_errors=True)  # the Hub client's notes, if moved along
    _mend_images(base)
    mended: dict = {"path": str(base)}
    for split in ("train", "val", "test"):
        entry = spec.get(split)
        where = _place(base, entry) if isinstance(entry, str) else None
        if where is None:
            if split == "train":
                raise TrainboxError(
                    f"{found.name}: train: {entry!r} is not in the dataset", ExitCode.DATASET
                )
            if entry is not None:
                log.warning("dataset: %s: %r is not in the dataset; left out", split, entry)
            continue
        mended[split] = str(where.relative_to(base))
    if "val" not in mended:
        mended |= _hold_out(base, mended["train"], fraction)
    mended |= {k: v for k, v in spec.items() if k not in ("path", "train", "val", "test")}
    write_atomic(base / "data.yaml", yaml.safe_dump(mended, sort_keys=False))
    return base / "data.yaml"


def _mend_images(base: Path) -> None:
    """The YOLO folder's images as LibreYOLO must read them, in place and under their own
    names (OpenCV tells the format by the bytes, not the suffix): an EXIF-turned one upright,
    a CMYK or palette one RGB; one that does not decode is removed with its label and counted
    (exit 3 past ``layout.BAD_SHARE``). Checked in threads, as the other forms' images are."""
    pictures = [p for p in base.rglob("*") if forms.is_image(p.name) and p.is_file()]
    tally = layout.Tally()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for picture, bad in zip(pictures, pool.map(_mend, pictures), strict=True):
            if bad:
                tally.bad += 1
                tally.first_bad = tally.first_bad or f"{picture.relative_to(base)}: {bad}"
                picture.unlink()
                _label(picture).unlink(missing_ok=True)
            else:
                tally.images["all"] += 1
                tally.rewritten += bad is None
    layout.check_bad(tally)
    if tally.rewritten:
        log.info("dataset: %d image(s) rewritten upright or as RGB (LibreYOLO ignores EXIF "
                 "orientation and trains on RGB only)", tally.rewritten)  # fmt: skip


def _mend(picture: Path) -> str | None:
    """Why the image is bad; ``""`` when it is kept as it is, None when it was rewritten."""
    ready = images.attempt(picture.read_bytes())
    if isinstance(ready, str):
        return ready
    if not ready.rewritten:
        return ""
    write_atomic(picture, ready.data)
    return None


def _label(picture: Path) -> Path:
    """Where LibreYOLO looks for an image's label: the last ``/images/`` made ``/labels/``."""
    parts = list(picture.with_suffix(".txt").parts)
    if "images" in parts:
        parts[len(parts) - 1 - parts[::-1].index("images")] = "labels"
    return Path(*parts)


def _place(base: Path, entry: str) -> Path | None:
    """Where a data.yaml's split entry is: as written, else without its leading ``../``
    (Roboflow's ``../train/images`` means ``train/images`` beside the yaml)."""
    for candidate in (base / entry, base / entry.removeprefix("../")):
        resolved = candidate.resolve()
        if (resolved == base.resolve() or base.resolve() in resolved.parents) and resolved.exists():
            return resolved
    return None


def _hold_out(base: Path, train: str, fraction: float) -> dict:
    """No validation split: lists of train images, each held out by ``layout.held_out``."""
    pictures = sorted(p for p in (base / train).rglob("*") if forms.is_image(p.name))
    held = [p for p in pictures if layout.held_out(str(p.relative_to(base)), fraction)]
    kept = [p for p in pictures if p not in set(held)]
    for name, chosen in (("train.txt", kept), ("val.txt", held)):
        # relative to the list's folder, where LibreYOLO resolves them: the copy moves after
        write_atomic(base / name, "".join(f"./{p.relative_to(base)}\n" for p in chosen))
    log.info("dataset: no validation split; holding out %d of %d train images (seeded)",
             len(held), len(pictures))  # fmt: skip
    return {"train": "train.txt", "val": "val.txt"}


def _coco(fetched: Path, root: Path, fraction: float, forced_box: str) -> Path:
    """Each COCO JSON's images and boxes, as YOLO labels (COCO boxes are [x, y, w, h] in
    pixels, unless BBOX_FORMAT says otherwise); classes in the categories' listed order."""
    files = [p for p in _published(fetched, "*.json") if forms.COCO_JSON.search(p.name)]
    documents = [(path, json.loads(path.read_text())) for path in files]
    names, ids = _categories(documents)
    splits = {_split(path) for path, _ in documents}
    writer = layout.Writer(root, "detect", names,
                           layout="xywh" if forced_box == "auto" else forced_box,
                           holdout=0.0 if "val" in splits else fraction)  # fmt: skip
    for path, document in documents:
        writer.add_all(_coco_rows(path, document, ids))
    return writer.finish()


def _coco_rows(path: Path, document: dict, ids: dict[int, int]) -> Iterator[tuple]:
    """A COCO JSON's images as ``(split, key, bytes, [(box, class id)])``."""
    split = _split(path)
    boxes: dict[int, list] = {}
    for note in document.get("annotations", []):
        if not note.get("iscrowd") and "bbox" in note:
            boxes.setdefault(note["image_id"], []).append(
                (note["bbox"], ids.get(note.get("category_id"), -1)))  # fmt: skip
    for number, image in enumerate(document.get("images", [])):
        picture = _image(path, split, image.get("file_name", ""))
        data = picture.read_bytes() if picture else None
        yield split, f"{split}-{number:07d}", data, boxes.get(image.get("id"), [])


def _categories(documents: list[tuple[Path, dict]]) -> tuple[list[str], dict[int, int]]:
    """The class names in the categories' listed order, and category id -> class id; a
    Roboflow placeholder (used by no box, named as the others' supercategory) is dropped."""
    listed: dict[int, str] = {}
    for _, document in documents:
        for category in document.get("categories", []):
            listed.setdefault(category["id"], str(category["name"]))
    used = {n.get("category_id") for _, d in documents for n in d.get("annotations", [])}
    supers = {str(c.get("supercategory")) for _, d in documents for c in d.get("categories", [])}
    kept = [cid for cid, name in listed.items() if cid in used or name not in supers]
    if dropped := [listed[cid] for cid in listed if cid not in kept]:
        log.info("dataset: category %s dropped (no box uses it; Roboflow's placeholder)",
                 ", ".join(dropped))  # fmt: skip
    return [listed[cid] for cid in kept], {cid: index for index, cid in enumerate(kept)}


def _split(path: Path) -> str:
    """A COCO JSON's split: ``instances_val2017.json``, or Roboflow's ``valid/_annotations...``."""
    stem = path.stem.removeprefix("instances_").rstrip("0123456789")
    for name in (stem, path.parent.name):
        if split := layout.split_of(name):
            return split
    return "train"


def _image(json_path: Path, split: str, name: str) -> Path | None:
    """An image a COCO JSON names: beside it (Roboflow), or under ``images/SPLIT`` (COCO)."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts:
        return None  # counted as a bad image: the name leaves the dataset
    base, images = json_path.parent, json_path.parent.parent / "images"
    # beside it; images/SPLIT (or images/val2017); images/; the folder above
    for folder in (base, images / split, *sorted(images.glob(f"{split}*")), images, base.parent):
        if (folder / relative).is_file():
            return folder / relative
        if (folder / relative.name).is_file():
            return folder / relative.name
    return None


def _imagefolder(fetched: Path, root: Path, fraction: float) -> Path:
    """``SPLIT/CLASS/IMAGE`` as LibreYOLO's class folders; classes in sorted order (how
    LibreYOLO numbers folders)."""
    pictures = [p for p in _published(fetched) if forms.is_image(p.name)]
    names = sorted({p.parent.name for p in pictures})
    splits = {layout.split_of(p.parent.parent.name) for p in pictures}
    writer = layout.Writer(root, "classify", names, holdout=0.0 if "val" in splits else fraction)

    def rows() -> Iterator[tuple]:
        for number, picture in enumerate(pictures):
            split = layout.split_of(picture.parent.parent.name) or "train"
            data = picture.read_bytes()
            os.unlink(picture)  # the converted copy replaces it: the volume never holds both
            yield split, f"{number:07d}", data, names.index(picture.parent.name)

    writer.add_all(rows())
    return writer.finish()
