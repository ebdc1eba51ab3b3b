"""A conversation and its messages come out of their store as records: the running
summary with the conversation (after ``save_summary``, the next ``active`` has it), a
summary that cannot be one as none, and messages oldest first with their sizes."""

from __future__ import annotations

from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.collections import ensure_indexes
from storage.repos.conversation_record import Conversation, StoredMessage, Summary
from storage.repos.conversations import ConversationRepo, MessageRepo

Doc = dict[str, Any]


async def test_the_summary_comes_with_the_conversation(db: AsyncDatabase[Doc]) -> None:
    await ensure_indexes(db)
    repo = ConversationRepo(db)
    conv = await repo.active("telegram:1", channel="telegram", chat_id="1")
    assert conv.key == "telegram:1" and conv.summary is None
    assert await repo.save_summary("telegram:1", conv.id, "agreed: Friday", 7, None)
    again = await repo.active("telegram:1")
    assert again == Conversation(conv.id, "telegram:1", Summary("agreed: Friday", 7))
    assert await repo.summary(conv.id) == (Summary("agreed: Friday", 7), 0)
    await db[c.CONVERSATIONS].update_one({"_id": conv.id}, {"$set": {"summary": "oops"}})
    assert await repo.summary(conv.id) == (None, 0)


async def test_messages_come_oldest_first_with_their_sizes(db: AsyncDatabase[Doc]) -> None:
    await ensure_indexes(db)
    messages, conv = MessageRepo(db), ObjectId()
    hello = [{"kind": "text", "text": "hello"}]
    await messages.append(conv, [{"role": "user", "parts": hello, "tokens": 3}], start_seq=0)
    await messages.append(conv, [{"role": "assistant", "parts": []}], start_seq=1)
    assert await messages.recent(conv) == [
        StoredMessage(0, "user", hello, 3),
        StoredMessage(1, "assistant", (), 0),
    ]
