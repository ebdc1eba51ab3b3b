"""Photos made small enough for a model: bounded pixels and edge, no EXIF, a format both take.

A phone photo (4000x3000, 3-5 MB) would cost thousands of input tokens and a large
request. ``prepare_image`` turns EXIF orientation into pixels, drops the EXIF (and
its GPS position), and re-encodes as JPEG (quality 85) when the image is larger than
``max_edge`` or not a JPEG, PNG or WebP. What is already small and clean is sent as
it came. ``openai_image_tokens`` and ``gemini_image_tokens`` are the providers'
published per-image formulas, for logs and estimates.

A file of a few hundred kB can announce a hundred million pixels, and decoding holds
every one of them in memory. So the pixel count is read from the header first
(``Image.open`` decodes nothing) and a photo over ``max_pixels`` is never decoded: the
model gets ``OversizedImage.note`` instead. One within the cap is decoded as small as
the format allows: a JPEG at 1/2, 1/4 or 1/8 scale (``draft``), the others in full and
then reduced; it is turned upright only once small. Pillow's own decompression-bomb
limit (``Image.MAX_IMAGE_PIXELS``, process-wide and not ours to set) stays as it is;
its error, and its warning where a filter makes that an error, count as over the cap.

Within the cap one decode still holds every pixel of its photo while it runs, so photos
arriving together in several chats would add up: ``ImageDecoder`` runs the decodes of
the whole agent one at a time (``AgentDeps.images``).
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # Pillow loads with the first photo: an idle agent does without it
    from PIL import Image

log = logging.getLogger(__name__)

JPEG_QUALITY = 85
KEPT_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
DRAFT_FORMATS = {"JPEG", "MPO"}
"""Formats Pillow can decode at a reduced scale (an MPO is a phone's multi-picture JPEG)."""


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    mime: str
    width: int
    height: int


@dataclass(frozen=True)
class OversizedImage:
    """A photo with more pixels than the cap: not decoded. ``size`` is what its header
    says (``None`` when Pillow refused it before telling)."""

    size: tuple[int, int] | None
    max_pixels: int

    @property
    def note(self) -> str:
        """The one line the model gets instead of the photo."""
        of = f" of {self.size[0]}x{self.size[1]} pixels" if self.size is not None else ""
        return f"[photo{of}: too large to look at; limit {megapixels(self.max_pixels)}]"


def megapixels(pixels: int) -> str:
    return f"{pixels / 1_000_000:.1f}".removesuffix(".0") + " megapixels"


def prepare_image(
    data: bytes, max_edge: int, *, max_pixels: int
) -> PreparedImage | OversizedImage | None:
    """``data`` bounded to ``max_edge`` px on its longest side, upright, without EXIF;
    ``OversizedImage`` (not decoded) past ``max_pixels``; None when it is not an image
    Pillow can read. Either way the model gets a marker instead."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > max_pixels:
                return OversizedImage(image.size, max_pixels)
            return _prepare(image, data, max_edge)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        log.warning("an image was refused by Pillow's pixel limit: %s", exc)
        return OversizedImage(None, max_pixels)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        log.warning("an image could not be read (%s: %s)", type(exc).__name__, exc)
        return None


class Prepare(Protocol):
    """``prepare_image``'s signature (a test may wrap it to watch the decodes)."""

    def __call__(
        self, data: bytes, max_edge: int, *, max_pixels: int
    ) -> PreparedImage | OversizedImage | None: ...


class ImageDecoder:
    """Prepares photos off the event loop, ``workers`` at a time (one by default).

    The bound is the decoder's own thread pool, so it holds whatever the callers do: a
    photo waits its turn in the pool's queue, and one whose turn was cancelled while it
    waited is dropped from it; one already decoding finishes (a thread cannot be
    stopped) while still holding its worker. Built once by the composition root and
    closed there; the worker thread starts with the first photo.
    """

    def __init__(self, workers: int = 1, decode: Prepare = prepare_image) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="image-decode")
        self._decode = decode

    async def prepare(
        self, data: bytes, max_edge: int, *, max_pixels: int
    ) -> PreparedImage | OversizedImage | None:
        """``prepare_image(data, max_edge, max_pixels=...)`` in the decoder's turn."""
        job = functools.partial(self._decode, data, max_edge, max_pixels=max_pixels)
        return await asyncio.get_running_loop().run_in_executor(self._pool, job)

    def close(self) -> None:
        """Photos still waiting are dropped; one being decoded finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _prepare(image: Image.Image, data: bytes, max_edge: int) -> PreparedImage:
    from PIL import Image, ImageOps

    fmt = image.format or ""
    has_exif = bool(image.getexif()) or "exif" in image.info
    if fmt in KEPT_FORMATS and not has_exif and max(image.size) <= max_edge:
        return PreparedImage(data, KEPT_FORMATS[fmt], image.width, image.height)
    fits = max(image.size) <= max_edge
    if fmt in DRAFT_FORMATS:
        # Decode at a reduced scale (1/2, 1/4, 1/8) still at least the target size.
        scale = min(1.0, max_edge / max(image.size))
        image.draft("RGB", (round(image.width * scale), round(image.height * scale)))
    # Reduced first (the box is square, so turning it later gives the same size), then
    # turned upright: the full-size pixels are never copied.
    image.thumbnail((max_edge, max_edge), Image.Resampling.LANCZOS)
    ImageOps.exif_transpose(image, in_place=True)
    out = io.BytesIO()
    if fmt in ("PNG", "WEBP") and fits:
        # Only the EXIF had to go: keep the format (and any transparency).
        image.save(out, format=fmt)
        return PreparedImage(out.getvalue(), KEPT_FORMATS[fmt], image.width, image.height)
    _flatten(image).save(out, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    return PreparedImage(out.getvalue(), "image/jpeg", image.width, image.height)


def _flatten(image: Image.Image) -> Image.Image:
    """RGB for JPEG: transparency on white, palettes and other modes converted."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "P"):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image if image.mode == "RGB" else image.convert("RGB")


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI's high-detail cost: fit in 2048x2048, shortest side down to 768, then
    85 + 170 per 512 px tile."""
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(round(w, 6) / 512) * math.ceil(round(h, 6) / 512)
    return 85 + 170 * tiles


def gemini_image_tokens(width: int, height: int) -> int:
    """Gemini's cost: 258 for an image up to 384 px on both sides, else 258 per
    768x768 tile."""
    if width <= 384 and height <= 384:
        return 258
    return 258 * math.ceil(width / 768) * math.ceil(height / 768)
