"""Telegram photos and voice notes: announced in an update, fetched with ``getFile`` and
the file URL from the fake Bot API by the real python-telegram-bot, stored in GridFS
and referenced from the inbox row; caps, crashes and strangers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from channels.delivery.media import MediaCaps
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from tests.channels.media_kit import (
    CrashAfterPut,
    Db,
    Doc,
    MediaStack,
    crash_before_fetch,
    gridfs_files,
    media_of,
    media_stack,
    stored_bytes,
)
from tests.conftest import make_settings
from tests.fakes.fixtures import fake
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["fake"]  # a fixture, imported for pytest

OWNER, STRANGER = 4242, 777
Make = Callable[..., Awaitable[MediaStack]]


@pytest.fixture
async def make(db: Db, fake: FakeTelegram, http: aiohttp.ClientSession) -> AsyncIterator[Make]:
    running: list[tuple[TelegramChannel, MediaStack]] = []

    async def build(model: ScriptedModel, **kwargs: Any) -> MediaStack:
        channel = TelegramChannel(
            TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1),
            media_max_bytes=kwargs.get("caps", MediaCaps()).max_bytes,
        )  # fmt: skip
        settings = make_settings(owner_telegram_ids=[OWNER])
        stack = await media_stack(db, settings, {"telegram": channel}, model, http, **kwargs)
        await channel.start(stack.pipeline.submit)
        running.append((channel, stack))
        return stack

    yield build
    for channel, stack in running:
        await channel.stop()
        await stack.stop()


async def settle(fake: FakeTelegram, stack: MediaStack, update: Doc) -> None:
    await fake.wait_confirmed(update["update_id"])
    await stack.pipeline.join()


def _photo_sizes(fake: FakeTelegram, *sizes: bytes) -> list[Doc]:
    out = []
    for n, data in enumerate(sizes):
        hosted = fake.files.add(data, folder="photos", ext="jpg")
        side = 90 * (n + 1)
        out.append({"file_id": hosted.file_id, "file_unique_id": f"p{n}", "width": side,
                    "height": side, "file_size": len(data)})  # fmt: skip
    return out


def _voice(fake: FakeTelegram, data: bytes, duration: int, size: int | None = None) -> Doc:
    hosted = fake.files.add(data, folder="voice", ext="oga")
    return {"file_id": hosted.file_id, "file_unique_id": "v", "duration": duration,
            "mime_type": "audio/ogg", "file_size": len(data) if size is None else size}  # fmt: skip


async def test_photo_and_voice_note_are_stored_and_referenced(
    make: Make, fake: FakeTelegram, db: Db
) -> None:
    model = ScriptedModel(lambda r: "got it")
    stack = await make(model, caps=MediaCaps(max_bytes=300_000))
    small, big, huge = os.urandom(2_000), os.urandom(200_000), os.urandom(400_000)
    photo = fake.push_content(OWNER, photo=_photo_sizes(fake, small, big, huge), caption="cat")
    ogg = os.urandom(30_000)
    voice = fake.push_content(OWNER, voice=_voice(fake, ogg, duration=12))
    await settle(fake, stack, voice)
    [image] = await media_of(db, external_id=str(photo["update_id"]))
    assert image["kind"] == "image" and image["mime"] == "image/jpeg"
    assert await stored_bytes(db, image) == big  # the largest size under the cap
    assert "source" not in image and image["size"] == len(big)
    [audio] = await media_of(db, external_id=str(voice["update_id"]))
    assert (audio["kind"], audio["mime"], audio["duration_s"]) == ("audio", "audio/ogg", 12)
    assert await stored_bytes(db, audio) == ogg
    assert len(fake.files.get_file_calls) == 2 and len(fake.files.downloads) == 2
    assert [r.messages[-1].text for r in model.requests] == ["[Photo] cat", "[Voice note 0:12]"]
    assert await gridfs_files(db) == 2


async def test_image_document_and_audio_file_are_media(
    make: Make, fake: FakeTelegram, db: Db
) -> None:
    stack = await make(ScriptedModel(lambda r: "ok"))
    png = os.urandom(5_000)
    hosted = fake.files.add(png, folder="documents", ext="png")
    document = {"file_id": hosted.file_id, "file_unique_id": "d", "file_name": "plan.png",
                "mime_type": "image/png", "file_size": len(png)}  # fmt: skip
    first = fake.push_content(OWNER, document=document)
    song = fake.files.add(b"ID3" + os.urandom(9_000), folder="music", ext="mp3")
    audio = {"file_id": song.file_id, "file_unique_id": "a", "duration": 200,
             "mime_type": "audio/mpeg", "file_name": "song.mp3"}  # fmt: skip
    second = fake.push_content(OWNER, audio=audio)
    await settle(fake, stack, second)
    [doc_item] = await media_of(db, external_id=str(first["update_id"]))
    assert (doc_item["kind"], doc_item["mime"], doc_item["name"]) == (
        "image",
        "image/png",
        "plan.png",
    )
    assert await stored_bytes(db, doc_item) == png
    [song_item] = await media_of(db, external_id=str(second["update_id"]))
    assert (song_item["kind"], song_item["mime"], song_item["name"]) == (
        "audio",
        "audio/mpeg",
        "song.mp3",
    )
    assert await stored_bytes(db, song_item) == song.data


async def test_announced_caps_mean_no_download_and_a_polite_note(
    make: Make, fake: FakeTelegram, db: Db
) -> None:
    model = ScriptedModel(lambda r: "ok")
    stack = await make(model, caps=MediaCaps(max_bytes=50_000, max_audio_seconds=600))
    long_voice = fake.push_content(OWNER, voice=_voice(fake, os.urandom(1_000), duration=840))
    big = _photo_sizes(fake, os.urandom(60_000), os.urandom(80_000))
    photo = fake.push_content(OWNER, photo=big)
    await settle(fake, stack, photo)
    assert fake.files.fetched == 0 and await gridfs_files(db) == 0
    [voice_item] = await media_of(db, external_id=str(long_voice["update_id"]))
    note = "[voice note of 14 min: too long to listen to; limit 10 min]"
    assert voice_item["status"] == "too_large" and voice_item["note"] == note
    [photo_item] = await media_of(db, external_id=str(photo["update_id"]))
    assert photo_item["status"] == "too_large" and photo_item["size"] == 60_000
    seen = [r.messages[-1].text for r in model.requests]
    assert seen[0] == f"[Voice note 14:00]\n{note}"
    assert seen[1] == "[Photo]\n[photo of 60 kB: too large to look at; limit 50 kB]"


async def test_actual_bytes_over_the_cap_stop_the_download(
    make: Make, fake: FakeTelegram, db: Db
) -> None:
    model = ScriptedModel(lambda r: "ok")
    stack = await make(model, caps=MediaCaps(max_bytes=100_000))
    # The update and getFile both claim 1 kB; the file is 2 MB.
    hosted = fake.files.add(os.urandom(2_000_000), folder="voice", ext="oga", announced_size=1_000)
    voice = {"file_id": hosted.file_id, "file_unique_id": "v", "duration": 5, "file_size": 1_000}
    update = fake.push_content(OWNER, voice=voice)
    await settle(fake, stack, update)
    [item] = await media_of(db, external_id=str(update["update_id"]))
    assert item["status"] == "too_large" and "too large to listen to" in item["note"]
    assert len(fake.files.downloads) == 1 and await gridfs_files(db) == 0
    assert "too large to listen to; limit 100 kB]" in model.requests[0].messages[-1].text


async def test_stranger_photo_is_never_fetched(make: Make, fake: FakeTelegram, db: Db) -> None:
    model = ScriptedModel(lambda r: "must not be called")
    stack = await make(model)
    update = fake.push_content(STRANGER, photo=_photo_sizes(fake, os.urandom(3_000)))
    await fake.wait_sent(1)  # the refusal
    await settle(fake, stack, update)
    assert fake.files.fetched == 0 and model.requests == []
    assert await media_of(db, external_id=str(update["update_id"])) == []
    assert await gridfs_files(db) == 0


@pytest.mark.parametrize("crash", ["before_download", "after_store"])
async def test_crash_between_inbox_write_and_download(
    make: Make, fake: FakeTelegram, db: Db, crash: str
) -> None:
    ogg = os.urandom(20_000)
    voice = _voice(fake, ogg, duration=3)
    if crash == "before_download":
        first = await make(ScriptedModel(lambda r: "unused"), hook=crash_before_fetch)
    else:
        first = await make(ScriptedModel(lambda r: "unused"), store=CrashAfterPut(db))
    update = fake.push_content(OWNER, voice=voice)
    await settle(fake, first, update)  # the worker died
    [item] = await media_of(db, external_id=str(update["update_id"]))
    assert item["status"] == "pending" and "source" in item
    await first.stop()
    model = ScriptedModel(lambda r: "heard you")
    second = await make(model)
    assert await second.pipeline.recover(sole_owner=True) == 1
    await fake.wait_sent(1)
    await second.pipeline.join()
    [item] = await media_of(db, external_id=str(update["update_id"]))
    assert await stored_bytes(db, item) == ogg
    assert len(fake.files.downloads) == 1 and await gridfs_files(db) == 1
    assert [s.visible for s in fake.sent] == ["heard you"]
    await asyncio.sleep(0)
