"""Conversations opened together after a quiet stretch: the server has closed every
pooled connection, and a burst of chats opens (the first alone, the others in one
batch: ``storage.coalesce``). Each chat gets exactly one conversation, new or found."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from pymongo import AsyncMongoClient

from storage import collections as c
from storage.repos.conversations import ConversationRepo
from tests.fakes.unheard_close import UnheardCloseRelay

Doc = dict[str, Any]


async def test_a_burst_after_a_quiet_stretch_opens_one_conversation_per_chat(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    db = bare_client[f"quiet_conv_{uuid.uuid4().hex[:8]}"]
    await db[c.CONVERSATIONS].create_index([("key", 1), ("active", 1)])
    keys = [f"telegram:{n}" for n in range(12)]
    # Some chats talked before the quiet stretch; their connections are in the pool.
    warm = ConversationRepo(db)
    before = await asyncio.gather(*(warm.active(key) for key in keys[:6]))
    await relay.quiet()  # every pooled connection is closed by the server now

    repo = ConversationRepo(db)  # a fresh cache: every chat is read from the database
    opened = await asyncio.gather(*(repo.active(key, channel="telegram") for key in keys))

    assert [doc.key for doc in opened] == keys
    assert [doc.id for doc in opened[:6]] == [doc.id for doc in before]
    stored = Counter([d["key"] async for d in db[c.CONVERSATIONS].find({"active": True})])
    assert stored == Counter(keys)  # nobody got a second conversation from a retry

    await relay.quiet()  # and once more, all of them known now
    later = ConversationRepo(db)
    again = await asyncio.gather(*(later.active(key) for key in keys))
    assert [doc.id for doc in again] == [doc.id for doc in opened]
