"""One published image made ready for LibreYOLO: its bytes kept, unless training would read them
wrong.

LibreYOLO decodes with OpenCV, which ignores nothing it is not told about: it reads pixels as
stored (an EXIF orientation tag is not applied, so the published boxes, drawn on the upright
image, land on a rotated one), and it cannot train on CMYK, palette or 16-bit images as they
are. Those are rewritten upright and RGB; every other image is copied byte for byte. Width and
height always come from the image itself, after that rotation.
"""

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps

# Pillow's own limit (Image.MAX_IMAGE_PIXELS, about 89 megapixels): past it Pillow warns, past
# twice it refuses (DecompressionBombError). Past the limit, the image is counted as bad.
MAX_PIXELS = Image.MAX_IMAGE_PIXELS
SUFFIX = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}
TRAINABLE = {"RGB", "L"}
ORIENTATION = 0x0112  # the EXIF tag


class BadImage(ValueError):
    """An image that does not decode, or would decode past the pixel limit."""


@dataclass(frozen=True)
class Ready:
    data: bytes
    suffix: str
    width: int
    height: int
    rewritten: str = ""  # why the bytes were rewritten ("EXIF orientation 6", "CMYK"), or ""


def attempt(data: bytes | None) -> "Ready | str":
    """``prepare``'s answer, or why the image is bad."""
    if not data:
        return "no image bytes"
    try:
        return prepare(data)
    except BadImage as err:
        return str(err)


def prepare(data: bytes) -> Ready:
    """The image's bytes as LibreYOLO should read them, its file suffix and its size."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise BadImage(f"{width}x{height} is past Pillow's pixel limit")
            # A JPEG decodes at 1/8 scale: every byte is still read (a truncated or corrupt
            # file fails), at 0.8 of the full decode's time (640x480, 2026-12-05).
            image.draft(image.mode, (width // 8, height // 8))
            image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning,
            Image.DecompressionBombError) as err:  # fmt: skip
        raise BadImage(str(err) or type(err).__name__) from None
    orientation = image.getexif().get(ORIENTATION, 1)
    reasons = []
    if orientation not in (1, None):
        reasons.append(f"EXIF orientation {orientation}")
    if image.mode not in TRAINABLE or image.format not in SUFFIX:
        reasons.append(f"{image.format} {image.mode}")
    if not reasons:
        return Ready(data, SUFFIX[image.format], width, height)
    image = Image.open(io.BytesIO(data))  # again, at full size
    upright = ImageOps.exif_transpose(image)
    if upright.mode not in TRAINABLE:
        upright = upright.convert("RGB")
    out = io.BytesIO()
    if image.format == "JPEG" and upright.mode in TRAINABLE:
        upright.save(out, "JPEG", quality=95)
        suffix = ".jpg"
    else:  # lossless for everything else
        upright.save(out, "PNG")
        suffix = ".png"
    return Ready(out.getvalue(), suffix, upright.width, upright.height, ", ".join(reasons))


def upright_size(data: bytes | None) -> tuple[int, int] | None:
    """The image's width and height as it is viewed (EXIF turns 5-8 swap them), read from its
    header alone; None when it does not open."""
    try:
        image = Image.open(io.BytesIO(data or b""))
    except (OSError, ValueError):
        return None
    turned = image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8)
    return (image.height, image.width) if turned else image.size
