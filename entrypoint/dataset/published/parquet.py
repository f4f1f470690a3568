"""Read a dataset as the ``datasets`` library publishes it: parquet files of rows.

What is relied on (``datasets`` 5.2.0, read 2026-12-05): ``push_to_hub`` writes
``data/SPLIT-NNNNN-of-NNNNN.parquet`` (or ``CONFIG/SPLIT-...``); the Hub's conversion branch
``refs/convert/parquet`` holds ``CONFIG/SPLIT/NNNN.parquet``. Each file's schema metadata key
``huggingface`` holds ``{"info": {"features": ...}}``, the features as
``Features.to_dict`` writes them: an ``Image`` is ``{"_type": "Image"}`` and stored as
``struct<bytes, path>``; a ``ClassLabel`` is ``{"_type": "ClassLabel", "names": [...]}``; lists
are ``{"_type": "List", "feature": ...}`` (``Sequence`` in older files). A detection column
(``objects``, ``annotations``, ...) holds ``bbox`` and a category, either as a struct of lists
(``Sequence({...})``) or as a list of structs (``List({...})``). Classification rows are an
image and a ``ClassLabel`` (``label``). Files are read one row group at a time.
"""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from entrypoint.errors import ExitCode, TrainboxError

IMAGE_COLUMNS = ("image", "img", "images", "picture", "photo")
OBJECT_COLUMNS = ("objects", "annotations", "annotation", "labels", "boxes", "detections")
CATEGORY_KEYS = ("category", "categories", "category_id", "label", "labels", "class",
                 "class_id", "classes")  # fmt: skip
LABEL_COLUMNS = ("label", "labels", "class", "category", "fine_label", "coarse_label")
BATCH_ROWS = 64  # rows decoded at once: a row group is read in batches, images in memory
# `data/train-00000-of-00001.parquet`, `CONFIG/validation-00000-of-00002.parquet`,
# `CONFIG/test/0000.parquet`, `CONFIG/partial-train/0000.parquet` (the conversion branch)
SPLIT_IN_NAME = re.compile(r"(?:^|/)(?:partial-)?([A-Za-z]\w*?)(?:-\d{5}-of-\d{5}|/\d+)\.parquet$")


def split_of(name: str) -> str:
    """The split a parquet file belongs to, by its name ('' when it says none)."""
    found = SPLIT_IN_NAME.search(name)
    return found.group(1) if found else ""


def config_of(name: str) -> str:
    """The config (subset) a parquet file belongs to: the folder before its split's part
    (``data`` for push_to_hub's default config; '' at the repo's top)."""
    found = SPLIT_IN_NAME.search(name)
    return name[: found.start()] if found else str(Path(name).parent).removeprefix(".")


@dataclass(frozen=True)
class Schema:
    """The columns to read and what they mean."""

    task: str  # "detect" or "classify"
    image: str
    target: str  # the objects column (detect) or the label column (classify)
    bbox: str = ""  # key of the box in each object
    category: str = ""  # key of the class id in each object
    names: tuple[str, ...] = ()

    @property
    def label_key(self) -> str:
        """The feature holding the class: the objects' category key, or the label column."""
        return self.category if self.task == "detect" else self.target

    def describe(self) -> str:
        if self.task == "classify":
            return f"classification: image column {self.image!r}, label column {self.target!r}"
        return (f"detection: image column {self.image!r}, boxes {self.target}.{self.bbox}, "
                f"classes {self.target}.{self.category}")  # fmt: skip


def _features(metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    raw = (metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        return json.loads(raw).get("info", {}).get("features", {}) or {}
    except (ValueError, AttributeError):
        return {}


def _names(feature: Any) -> tuple[str, ...]:
    """The ClassLabel names inside ``feature`` (through lists), or ()."""
    while isinstance(feature, dict):
        if feature.get("_type") == "ClassLabel":
            return tuple(str(n) for n in feature.get("names") or ())
        feature = feature.get("feature")
    return ()


def _pick(available: list[str], wanted: tuple[str, ...]) -> str | None:
    lower = {name.lower(): name for name in available}
    return next((lower[w] for w in wanted if w in lower), None)


def _struct_fields(arrow_type: Any) -> dict[str, Any]:
    """The fields of a struct column, through one level of list (a list of structs)."""
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_struct(arrow_type):
        return {arrow_type.field(i).name: arrow_type.field(i).type
                for i in range(arrow_type.num_fields)}  # fmt: skip
    return {}


def schema(path: Path | IO[bytes], where: str) -> Schema:
    """What ``path``'s columns mean; exit 3 with what was found when it is not a detection or
    classification dataset."""
    import pyarrow.parquet as pq

    arrow = pq.read_schema(path)
    features = _features(arrow.metadata)
    columns = list(arrow.names)
    images = [c for c in columns if (features.get(c) or {}).get("_type") == "Image"]
    image = images[0] if images else _pick(
        [c for c in columns if set(_struct_fields(arrow.field(c).type)) >= {"bytes"}],
        IMAGE_COLUMNS) or _pick(columns, IMAGE_COLUMNS)  # fmt: skip
    if image is None:
        raise TrainboxError(
            f"{where}: no image column among {', '.join(columns)}; set DATASET_FORMAT if this "
            "is not a parquet image dataset",
            ExitCode.DATASET,
        )
    for column in [c for c in columns if c != image]:
        inner = _struct_fields(arrow.field(column).type)
        if "bbox" in inner or "bboxes" in inner:
            bbox = "bbox" if "bbox" in inner else "bboxes"
            category = _pick(list(inner), CATEGORY_KEYS)
            if category is None:
                raise TrainboxError(
                    f"{where}: column {column!r} has boxes but no class ({', '.join(inner)}); "
                    "the class key should be one of " + ", ".join(CATEGORY_KEYS),
                    ExitCode.DATASET,
                )
            feature = features.get(column) or {}
            inner_features = feature.get("feature", feature) if isinstance(feature, dict) else {}
            names = _names((inner_features or {}).get(category))
            return Schema("detect", image, column, bbox, category, names)
    labels = [c for c in columns if _names(features.get(c))]
    label = (_pick(labels, LABEL_COLUMNS) or (labels[0] if labels else None)
             or _pick(columns, LABEL_COLUMNS))  # fmt: skip
    if label is None:
        raise TrainboxError(
            f"{where}: found image column {image!r} but no boxes (a column holding bbox) and no "
            f"class label among {', '.join(columns)}; this image does not train a detector or "
            "a classifier as published",
            ExitCode.DATASET,
        )
    return Schema("classify", image, label, names=_names(features.get(label)))


def _objects(value: Any, spec: Schema) -> list[tuple[list[float], Any]]:
    """A row's objects as ``(box, class id)``, from a struct of lists or a list of structs."""
    if not value:
        return []
    if isinstance(value, dict):  # struct of lists
        found = list(zip(value.get(spec.bbox) or [], value.get(spec.category) or [], strict=False))
    else:  # list of structs
        found = [(o.get(spec.bbox), o.get(spec.category)) for o in value if o]
    return [(list(box), cls) for box, cls in found if box is not None]


def rows(path: Path | IO[bytes], spec: Schema) -> Iterator[tuple[int, bytes | None, Any]]:
    """Each row's number, image bytes and target (the objects, or the class id), a batch of
    rows in memory at a time."""
    import pyarrow.parquet as pq

    number = 0
    with pq.ParquetFile(path) as table:
        for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=[spec.image, spec.target]):
            for row in batch.to_pylist():
                image = row[spec.image]
                data = image.get("bytes") if isinstance(image, dict) else image
                target = row[spec.target]
                yield number, data, _objects(target, spec) if spec.task == "detect" else target
                number += 1


def counts(path: Path | IO[bytes], spec: Schema) -> tuple[int, int]:
    """The rows of a parquet file and their boxes, reading the objects column only."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    if spec.task != "detect":
        return table.metadata.num_rows, 0
    found = 0
    for batch in table.iter_batches(batch_size=4096, columns=[spec.target]):
        found += sum(len(_objects(value, spec)) for value in batch.column(0).to_pylist())
    return table.metadata.num_rows, found


def card_names(card: str, key: str) -> list[str]:
    """The class names a dataset card's YAML gives the feature ``key`` (``dataset_info``'s
    features, as ``datasets`` writes them: ``class_label: {names: {'0': cat, ...}}`` inside
    the feature named ``key``, at any depth); [] when it names none."""
    import yaml

    head = card.split("---", 2)
    try:
        meta = yaml.safe_load(head[1]) if card.startswith("---") and len(head) == 3 else None
    except yaml.YAMLError:
        return []
    infos = (meta or {}).get("dataset_info") if isinstance(meta, dict) else None
    for info in infos if isinstance(infos, list) else [infos]:
        if isinstance(info, dict) and (found := _labels_under(info.get("features"), key)):
            return found
    return []


def _labels_under(node: Any, key: str, inside: bool = False) -> list[str]:
    """The first ``class_label`` names in ``node`` within a feature named ``key``."""
    if isinstance(node, list):
        return next((found for item in node if (found := _labels_under(item, key, inside))), [])
    if not isinstance(node, dict):
        return []
    inside = inside or node.get("name") == key
    names = (node.get("class_label") or {}).get("names") if inside else None
    if isinstance(names, dict):
        return [str(names[k]) for k in sorted(names, key=lambda k: int(k))]
    if isinstance(names, list):
        return [str(n) for n in names]
    return next((found for value in node.values()
                 if (found := _labels_under(value, key, inside))), [])  # fmt: skip
