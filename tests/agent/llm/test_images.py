"""Photos bounded for a model: pixels, edge, EXIF, format; and the providers' token
formulas."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from agent.llm.images import (
    OversizedImage,
    PreparedImage,
    gemini_image_tokens,
    openai_image_tokens,
    prepare_image,
)
from tests.agent.llm.pixels_kit import bilevel_png, gray_jpeg, size_of

EXIF_ORIENTATION = 0x0112
EXIF_GPS_IFD = 0x8825
CAP = 40_000_000


def photo(size: tuple[int, int], fmt: str = "JPEG", mode: str = "RGB", **save: object) -> bytes:
    image = Image.new(mode, size, (200, 30, 30) if mode == "RGB" else None)
    # Left half dark: after an EXIF rotation the dark half must be on top.
    image.paste((0, 0, 0) if mode == "RGB" else 0, (0, 0, size[0] // 2, size[1]))
    out = io.BytesIO()
    image.save(out, format=fmt, **save)
    return out.getvalue()


def rotated_phone_photo() -> bytes:
    """4000x3000 as stored by a phone held upright: EXIF orientation 6 and a GPS tag."""
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6  # display rotated 90 degrees clockwise
    exif[0x010F] = "PhoneMaker"
    return photo((4000, 3000), exif=exif.tobytes(), quality=90)


def test_a_4000x3000_phone_photo_is_bounded_upright_and_without_exif() -> None:
    original = rotated_phone_photo()
    prepared = prepare_image(original, 1568, max_pixels=CAP)
    assert isinstance(prepared, PreparedImage)
    assert prepared.mime == "image/jpeg"
    assert (prepared.width, prepared.height) == (1176, 1568)  # turned upright
    with Image.open(io.BytesIO(prepared.data)) as image:
        assert image.format == "JPEG" and image.size == (1176, 1568)
        assert not image.getexif() and "exif" not in image.info
        top, bottom = image.getpixel((588, 100)), image.getpixel((588, 1468))
    # Orientation 6: the left (dark) half of the stored pixels is shown on top.
    assert isinstance(top, tuple) and isinstance(bottom, tuple)
    assert sum(top) < 60 and sum(bottom) > 150
    assert len(prepared.data) < len(original)
    openai, gemini = openai_image_tokens(1176, 1568), gemini_image_tokens(1176, 1568)
    print(f"4000x3000 photo -> 1176x1568: OpenAI {openai} tokens, Gemini {gemini} tokens")
    assert (openai, gemini) == (765, 1548)


def test_small_png_and_webp_pass_unchanged() -> None:
    for fmt, mime in (("PNG", "image/png"), ("WEBP", "image/webp")):
        data = photo((640, 480), fmt)
        prepared = prepare_image(data, 1568, max_pixels=CAP)
        assert isinstance(prepared, PreparedImage)
        assert (prepared.data, prepared.mime, prepared.width) == (data, mime, 640)


def test_other_formats_become_jpeg_and_transparency_goes_on_white() -> None:
    bmp = prepare_image(photo((300, 200), "BMP"), 1568, max_pixels=CAP)
    assert isinstance(bmp, PreparedImage) and bmp.mime == "image/jpeg"
    assert (bmp.width, bmp.height) == (300, 200)
    clear = Image.new("RGBA", (3000, 1000), (0, 0, 0, 0))
    out = io.BytesIO()
    clear.save(out, format="PNG")
    big_png = prepare_image(out.getvalue(), 1568, max_pixels=CAP)
    assert isinstance(big_png, PreparedImage) and big_png.mime == "image/jpeg"
    assert (big_png.width, big_png.height) == (1568, 523)
    with Image.open(io.BytesIO(big_png.data)) as image:
        assert image.getpixel((10, 10)) == (255, 255, 255)


def test_small_png_with_exif_keeps_its_format_and_loses_the_exif() -> None:
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"
    prepared = prepare_image(photo((200, 100), "PNG", exif=exif.tobytes()), 1568, max_pixels=CAP)
    assert isinstance(prepared, PreparedImage) and prepared.mime == "image/png"
    with Image.open(io.BytesIO(prepared.data)) as image:
        assert not image.getexif()


def test_bytes_that_are_no_image_give_none() -> None:
    assert prepare_image(b"not an image at all", 1568, max_pixels=CAP) is None
    assert prepare_image(photo((100, 100))[:200], 1568, max_pixels=CAP) is None  # truncated


@pytest.mark.parametrize(
    ("size", "openai", "gemini"),
    [
        ((1024, 1024), 765, 4 * 258),  # OpenAI's own example: 4 tiles
        ((2048, 4096), 1105, 18 * 258),  # OpenAI's example: 768x1536, 6 tiles
        ((384, 384), 85 + 170, 258),  # Gemini: up to 384 px on both sides
        ((385, 300), 85 + 170, 258),
        ((512, 512), 85 + 170, 258),
        ((1568, 1568), 765, 258 * 9),
    ],
)
def test_token_formulas(size: tuple[int, int], openai: int, gemini: int) -> None:
    assert openai_image_tokens(*size) == openai
    assert gemini_image_tokens(*size) == gemini


# -- pixels: a small file with a huge picture -------------------------------------
def test_a_photo_over_the_pixel_cap_is_refused_from_its_header() -> None:
    data = bilevel_png(9000, 9000)  # 81 megapixels in about 10 kB
    assert len(data) < 50_000
    refused = prepare_image(data, 1568, max_pixels=CAP)
    assert refused == OversizedImage((9000, 9000), CAP)
    assert refused.note == "[photo of 9000x9000 pixels: too large to look at; limit 40 megapixels]"
    # The header alone decides: with its pixel data cut off, the answer is the same
    # (a decode would have failed on it).
    assert prepare_image(data[:100], 1568, max_pixels=CAP) == refused


def test_the_cap_is_inclusive_and_a_jpeg_within_it_is_downscaled() -> None:
    cap = 12_000_000
    allowed = prepare_image(gray_jpeg(4000, 3000), 1568, max_pixels=cap)
    assert isinstance(allowed, PreparedImage) and allowed.mime == "image/jpeg"
    assert (allowed.width, allowed.height) == (1568, 1176) == size_of(allowed.data)
    refused = prepare_image(gray_jpeg(4001, 3000), 1568, max_pixels=cap)
    assert refused == OversizedImage((4001, 3000), cap)
    assert refused.note.endswith("too large to look at; limit 12 megapixels]")


def test_a_big_png_within_the_cap_is_downscaled() -> None:
    prepared = prepare_image(bilevel_png(6000, 4000), 1568, max_pixels=CAP)
    assert isinstance(prepared, PreparedImage) and prepared.mime == "image/jpeg"
    assert (prepared.width, prepared.height) == (1568, 1045) == size_of(prepared.data)


def test_past_pillows_own_limit_the_photo_is_refused_without_its_size() -> None:
    """Pillow refuses to open past twice ``Image.MAX_IMAGE_PIXELS`` (about 179 MP)."""
    refused = prepare_image(bilevel_png(14000, 14000), 1568, max_pixels=500_000_000)
    assert refused == OversizedImage(None, 500_000_000)
    assert refused.note == "[photo: too large to look at; limit 500 megapixels]"


@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")
def test_pillows_warning_made_an_error_counts_as_over_the_cap() -> None:
    refused = prepare_image(bilevel_png(10000, 10000), 1568, max_pixels=500_000_000)
    assert refused == OversizedImage(None, 500_000_000)
