"""Photos of several chats at once are decoded one after another (``AgentDeps.images``),
and each chat's model request still gets its own photo."""

from __future__ import annotations

import asyncio
import dataclasses
import io

from PIL import Image

from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.llm.types import MediaPart
from agent.tools.catalog import core_catalog
from tests.agent.conversation.media_kit import Media, seed_inbox
from tests.agent.llm.decode_kit import DecodeRecorder, WatchedDecoder
from tests.contexts import owner_ctx
from tests.fakes.scripted import ScriptedModel
from tests.waiting import WATCHDOG, until

SIZES = ((4000, 3000), (3136, 3136), (3000, 4000))
"""Three phone photos, each bounded to a different size, so each reply shows whose it was."""


def jpeg(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (40, 120, 200)).save(out, format="JPEG", quality=90)
    return out.getvalue()


async def test_three_chats_photos_decode_one_at_a_time(deps: AgentDeps) -> None:
    recorder = DecodeRecorder()
    decoder = WatchedDecoder(recorder)
    deps = dataclasses.replace(deps, images=decoder)
    model = ScriptedModel(lambda _request: "a blue wall")
    agent = Agent(model, core_catalog())
    rows = [await seed_inbox(deps, Media("image", "image/jpeg", jpeg(size))) for size in SIZES]
    try:
        turns = [
            asyncio.create_task(
                agent.respond(
                    "[photo]", owner_ctx(deps, inbox_id=str(row), conversation_key=f"chat:{n}")
                )
            )
            for n, row in enumerate(rows)
        ]
        await until(lambda: decoder.asked == 3 and recorder.events, "all three photos asked for")
        recorder.release.set()
        replies = await asyncio.wait_for(asyncio.gather(*turns), WATCHDOG)
    finally:
        recorder.release.set()
        decoder.close()
    assert [reply.text for reply in replies] == ["a blue wall"] * 3
    assert recorder.most_at_once() == 1
    assert sorted(recorder.events) == sorted(
        [(kind, n) for n in range(3) for kind in ("start", "end")]
    )
    seen = set()
    for request in model.requests:
        [photo] = [p for m in request.messages for p in m.parts if isinstance(p, MediaPart)]
        assert photo.mime == "image/jpeg" and photo.data is not None
        with Image.open(io.BytesIO(photo.data)) as image:
            seen.add(image.size)
    assert seen == {(1568, 1176), (1568, 1568), (1176, 1568)}
