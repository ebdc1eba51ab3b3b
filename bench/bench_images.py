"""Photos with many pixels in few bytes: peak memory of three decoded at once (issue 28).

Each scenario runs in a fresh child process per path: it reads three copies of one
photo, notes its resident memory, then asks for the three at once with the default
``MEDIA_IMAGE_MAX_EDGE`` and ``MEDIA_MAX_PIXELS`` and prints the peak (``VmHWM``) and
what the model would get. Two paths: ``threads`` decodes each in its own thread
(``asyncio.to_thread(prepare_image, ...)``, how turns did it before), ``decoder``
goes through ``ImageDecoder`` as turns do now (``AgentDeps.images``, one at a time).
The files are real: PNGs are written row by row through zlib (an 88.8-megapixel RGB
PNG is about 270 kB, as in the field report), JPEGs by Pillow.

    .venv/bin/python bench/bench_images.py [--only NAME ...] [--path threads|decoder ...]
        [--images-from PATH]

``--images-from`` loads ``prepare_image`` (and ``ImageDecoder``, where it has one) from
another copy of ``agent/llm/images.py`` (for instance
``git show <commit>:agent/llm/images.py > /tmp/old_images.py``) to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import io
import json
import resource
import runpy
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script

from agent.config import Settings

COPIES = 3
PATHS = ("threads", "decoder")
# name: (format, width, height, PNG colour type or JPEG progressive)
SCENARIOS: dict[str, tuple[str, int, int, Any]] = {
    "png-rgb-88.8mp": ("png", 9424, 9424, "rgb"),
    "png-1bit-177mp": ("png", 13304, 13304, "1bit"),
    "png-rgb-40mp-at-cap": ("png", 6324, 6324, "rgb"),
    "jpeg-40mp-at-cap": ("jpeg", 7300, 5479, False),
    "jpeg-progressive-40mp-at-cap": ("jpeg", 7300, 5479, True),
    "jpeg-phone-12mp": ("jpeg", 4000, 3000, False),
}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, colour: str) -> bytes:
    """A plain PNG written row by row: never more than one row of pixels in memory."""
    if colour == "1bit":
        header, row = (1, 0), bytes(1 + (width + 7) // 8)
    else:  # 8-bit RGB, a grey gradient across each row
        header, row = (8, 2), b"\x00" + bytes([40, 120, 200]) * width
    ihdr = struct.pack(">IIBBBBB", width, height, *header, 0, 0, 0)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    body = _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def jpeg(width: int, height: int, progressive: bool) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    image.save(out, format="JPEG", quality=85, progressive=progressive)
    return out.getvalue()


def make_file(name: str, folder: Path) -> Path:
    fmt, width, height, variant = SCENARIOS[name]
    path = folder / f"{name}.{fmt}"
    if not path.exists():
        data = png(width, height, variant) if fmt == "png" else jpeg(width, height, variant)
        path.write_bytes(data)
    return path


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1e6


def peak_mb() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss`` it does not
    carry the parent's peak over ``fork`` and ``exec``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError("no VmHWM in /proc/self/status")


def load_images(images_from: str | None) -> dict[str, Any]:
    """The module's names: this tree's ``agent.llm.images`` or the file given."""
    if images_from is None:
        from agent.llm import images

        return vars(images)
    return runpy.run_path(images_from, run_name="images_under_test")


def ask_all(
    path: str, names: dict[str, Any], photos: list[bytes], edge: int, cap: int
) -> list[Any]:
    """The coroutines of three preparations asked for at once, by ``path``."""
    prepare: Callable[..., Any] = names["prepare_image"]
    kwargs = {"max_pixels": cap} if "max_pixels" in inspect.signature(prepare).parameters else {}
    if path == "threads":
        return [asyncio.to_thread(prepare, data, edge, **kwargs) for data in photos]
    decoder = names["ImageDecoder"]()
    return [decoder.prepare(data, edge, **kwargs) for data in photos]


async def child(photos: list[bytes], images_from: str | None, path: str) -> dict[str, Any]:
    """Three concurrent preparations of ``photos``, as three turns ask for them."""
    from PIL import Image  # loaded before the baseline: the agent has it after one photo

    assert Image.__name__
    names = load_images(images_from)
    defaults = Settings.model_fields
    edge, cap = defaults["media_image_max_edge"].default, defaults["media_max_pixels"].default
    before = rss_mb()
    started = time.perf_counter()
    results = await asyncio.gather(*ask_all(path, names, photos, edge, cap))
    seconds = time.perf_counter() - started
    first = results[0]
    if hasattr(first, "note"):
        got = first.note
    elif first is None:
        got = "unreadable"
    else:
        got = f"{first.mime} {first.width}x{first.height}, {len(first.data) // 1000} kB"
    return {"before": before, "peak": peak_mb(), "seconds": seconds, "got": got}


def run_child(name: str, path: Path, images_from: str | None, way: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(path), "--path", way]
    if images_from:
        command += ["--images-from", images_from]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS))
    parser.add_argument("--path", nargs="*", choices=PATHS, help="default: both")
    parser.add_argument("--images-from", help="another copy of agent/llm/images.py")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        photos = [Path(args.child).read_bytes() for _ in range(COPIES)]
        print(json.dumps(asyncio.run(child(photos, args.images_from, args.path[0]))))
        return
    source = args.images_from or "agent/llm/images.py (this tree)"
    ways = list(args.path or PATHS)
    if "decoder" in ways and "ImageDecoder" not in load_images(args.images_from):
        ways.remove("decoder")  # an older copy decoded in each turn's own thread
    print(f"{COPIES} copies asked for at once per scenario; images from {source}")
    print(
        f"{'scenario':30} {'path':8} {'file':>8} {'before':>9} {'peak':>9} {'time':>7}  model gets"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or SCENARIOS:
            path = make_file(name, Path(tmp))
            size = path.stat().st_size
            shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size // 1000} kB"
            for way in ways:
                figures = run_child(name, path, args.images_from, way)
                print(
                    f"{name:30} {way:8} {shown:>8} {figures['before']:>6.0f} MB"
                    f" {figures['peak']:>6.0f} MB {figures['seconds']:>6.2f}s  {figures['got']}"
                )


if __name__ == "__main__":
    main()
