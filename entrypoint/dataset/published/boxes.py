"""Which box layout a published dataset uses, proved by its values, and the YOLO line of a box.

The Hub's object-detection guide writes COCO boxes, ``[x, y, w, h]`` in pixels, but published
sets differ: ``detection-datasets/*`` write Pascal VOC ``[x1, y1, x2, y2]``, others normalize.
Each layout is tried against every sampled box and its image's size; a layout that puts boxes
past the image (beyond a rounding slack), or gives them a negative size, is contradicted.
Values all within 0..1 on images larger than that are normalized. Pixel boxes that fit both
layouts are COCO's (the Hub's guide); normalized boxes that fit several layouts have no
default: BBOX_FORMAT says. The decision and its evidence are one log line.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from entrypoint.errors import ExitCode, TrainboxError

PIXELS = ("xywh", "xyxy")
NORMALIZED = ("xywhn", "xyxyn", "cxcywhn")
SLACK = 0.01  # of the image's side: rounding in published boxes


@dataclass(frozen=True)
class Decision:
    format: str
    why: str


def corners(box: list[float], layout: str, width: int, height: int) -> tuple[float, ...]:
    """``box`` as (x1, y1, x2, y2) in pixels."""
    a, b, c, d = (float(v) for v in box)
    scale = (width, height) if layout.endswith("n") else (1, 1)
    a, c = a * scale[0], c * scale[0]
    b, d = b * scale[1], d * scale[1]
    if layout.startswith("cxcywh"):
        return a - c / 2, b - d / 2, a + c / 2, b + d / 2
    if layout.startswith("xywh"):
        return a, b, a + c, b + d
    return a, b, c, d


def _fits(box: list[float], layout: str, width: int, height: int) -> bool:
    x1, y1, x2, y2 = corners(box, layout, width, height)
    sx, sy = width * SLACK + 1, height * SLACK + 1
    return (x2 >= x1 and y2 >= y1 and x1 >= -sx and y1 >= -sy
            and x2 <= width + sx and y2 <= height + sy)  # fmt: skip


def decide(samples: Iterable[tuple[list[float], int, int]], forced: str = "auto") -> Decision:
    """The layout of the sampled boxes, each ``(box, image width, image height)``; ``forced``
    (BBOX_FORMAT) wins. Exit 3 when no layout fits, or several normalized ones do."""
    if forced != "auto":
        return Decision(forced, "BBOX_FORMAT")
    boxes = [(box, w, h) for box, w, h in samples if len(box) == 4]
    if not boxes:
        return Decision("xywh", "no boxes to tell by: COCO's [x, y, w, h] in pixels assumed")
    small = all(0 <= float(v) <= 1 for box, _, _ in boxes for v in box)
    big_images = any(w > 2 and h > 2 for _, w, h in boxes)
    candidates = NORMALIZED if small and big_images else PIXELS
    misfits = {lay: sum(not _fits(b, lay, w, h) for b, w, h in boxes) for lay in candidates}
    fitting = [lay for lay, bad in misfits.items() if bad == 0]
    evidence = ", ".join(f"{lay} puts {bad} past the image" for lay, bad in misfits.items())
    seen = f"{len(boxes)} boxes sampled"
    if len(fitting) == 1:
        return Decision(fitting[0], f"{seen}; {evidence}")
    if candidates == PIXELS and len(fitting) == 2:
        return Decision("xywh", f"{seen}, all fit both [x, y, w, h] and [x1, y1, x2, y2]: "
                                "COCO's [x, y, w, h] assumed")  # fmt: skip
    what = "fit several normalized layouts" if fitting else "fit no layout"
    raise TrainboxError(
        f"the dataset's boxes {what} ({seen}; {evidence}): set BBOX_FORMAT to one of "
        f"{', '.join(PIXELS + NORMALIZED)}",
        ExitCode.DATASET,
    )


def yolo(box: list[float], layout: str, width: int, height: int
         ) -> tuple[tuple[float, float, float, float], bool] | None:  # fmt: skip
    """The box as YOLO's normalized (cx, cy, w, h), clamped to the image, and whether it was
    clamped; None when nothing of it is left inside."""
    x1, y1, x2, y2 = corners(box, layout, width, height)
    inside = (max(0.0, min(x1, width)), max(0.0, min(y1, height)),
              max(0.0, min(x2, width)), max(0.0, min(y2, height)))  # fmt: skip
    a, b, c, d = inside
    if c - a < 1e-6 * width or d - b < 1e-6 * height:
        return None
    clamped = any(abs(u - v) > 0.5 for u, v in zip(inside, (x1, y1, x2, y2), strict=True))
    return ((a + c) / 2 / width, (b + d) / 2 / height, (c - a) / width, (d - b) / height), clamped
