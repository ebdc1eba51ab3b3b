"""MediaStore: GridFS on the real (SecantusDB) database, idempotent by key."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import gridfs
import pytest
from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.repos.media_files import MediaStore

Db = AsyncDatabase[dict[str, Any]]


async def test_put_then_get_round_trips_bytes(db: Db) -> None:
    store = MediaStore(db)
    data = os.urandom(600_000)  # spans several GridFS chunks
    file_id = await store.put(data, key="telegram:1:0", mime="image/jpeg", kind="image")
    assert await store.get(file_id) == data
    assert await store.get(str(file_id)) == data
    files = await db["media.files"].find_one({"_id": file_id})
    assert files is not None
    assert files["metadata"] == {"key": "telegram:1:0", "mime": "image/jpeg", "kind": "image"}
    assert files["length"] == len(data)


async def test_second_put_with_same_key_writes_nothing(db: Db) -> None:
    store = MediaStore(db)
    first = await store.put(b"one", key="sms:SM1:0", mime="image/png", kind="image")
    again = await MediaStore(db).put(b"two", key="sms:SM1:0", mime="image/png", kind="image")
    assert again == first
    assert await store.get(first) == b"one"
    assert await db["media.files"].count_documents({}) == 1
    assert await db["media.chunks"].count_documents({}) == 1
    assert await store.find("sms:SM1:0") == first
    assert await store.find("sms:SM1:1") is None


async def test_racing_puts_keep_one_file(db: Db) -> None:
    store = MediaStore(db)
    await store.put(b"x", key="warm-up", mime="image/png", kind="image")  # index exists
    ids = await asyncio.gather(
        *(
            MediaStore(db).put(b"y" * 1000, key="whatsapp:A:0", mime="audio/ogg", kind="audio")
            for _ in range(4)
        )
    )
    assert len(set(ids)) == 1
    assert await db["media.files"].count_documents({"metadata.key": "whatsapp:A:0"}) == 1
    assert await db["media.chunks"].count_documents({"files_id": ids[0]}) == 1
    assert await store.get(ids[0]) == b"y" * 1000


async def test_get_of_a_missing_file_raises_nofile(db: Db) -> None:
    with pytest.raises(gridfs.NoFile):
        await MediaStore(db).get(ObjectId())


async def test_transcript_is_kept_with_the_message(db: Db) -> None:
    inbox_id = ObjectId()
    await db[c.INBOX].insert_one(
        {"_id": inbox_id, "media": [{"kind": "image"}, {"kind": "audio", "status": "stored"}]}
    )
    await MediaStore(db).set_transcript(str(inbox_id), 1, "see you at six")
    doc = await db[c.INBOX].find_one({"_id": inbox_id})
    assert doc is not None
    assert doc["media"][1] == {"kind": "audio", "status": "stored", "transcript": "see you at six"}
    assert "transcript" not in doc["media"][0]
