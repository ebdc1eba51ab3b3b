"""``ImageDecoder``: photos asked for together are decoded one after another, and a
photo whose turn is cancelled while it waits is never decoded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agent.llm.images import PreparedImage
from tests.agent.llm.decode_kit import DecodeRecorder, WatchedDecoder
from tests.agent.llm.pixels_kit import bilevel_png
from tests.waiting import WATCHDOG, until

CAP = 40_000_000
EDGE = 1568


@pytest.fixture
def recorder() -> Iterator[DecodeRecorder]:
    recorder = DecodeRecorder()
    yield recorder
    recorder.release.set()  # a failed test leaves no worker waiting


async def test_three_photos_at_once_never_decode_together(recorder: DecodeRecorder) -> None:
    decoder = WatchedDecoder(recorder)
    photos = [bilevel_png(3136, height) for height in (2000, 1568, 3136)]  # halved exactly
    try:
        turns = [asyncio.create_task(decoder.prepare(p, EDGE, max_pixels=CAP)) for p in photos]
        await until(lambda: decoder.asked == 3 and recorder.events, "all three handed over")
        recorder.release.set()  # the first decode goes on with the other two waiting
        results = await asyncio.wait_for(asyncio.gather(*turns), WATCHDOG)
    finally:
        decoder.close()
    assert recorder.events == [
        ("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2),
    ]  # fmt: skip
    assert recorder.most_at_once() == 1
    sizes = [(r.width, r.height) for r in results if isinstance(r, PreparedImage)]
    assert sizes == [(1568, 1000), (1568, 784), (1568, 1568)]  # each turn its own photo


async def test_a_photo_cancelled_while_it_waits_is_never_decoded(
    recorder: DecodeRecorder,
) -> None:
    decoder = WatchedDecoder(recorder)
    photo = bilevel_png(2000, 2000)
    try:
        turns = [asyncio.create_task(decoder.prepare(photo, EDGE, max_pixels=CAP)) for _ in "abc"]
        await until(lambda: decoder.asked == 3 and recorder.events, "all three handed over")
        turns[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await turns[1]
        recorder.release.set()
        first, third = await asyncio.wait_for(asyncio.gather(turns[0], turns[2]), WATCHDOG)
    finally:
        decoder.close()
    assert isinstance(first, PreparedImage) and isinstance(third, PreparedImage)
    assert recorder.events == [("start", 0), ("end", 0), ("start", 1), ("end", 1)]
    assert recorder.most_at_once() == 1
