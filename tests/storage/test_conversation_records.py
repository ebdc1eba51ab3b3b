"""A conversation and its messages come out of their store as records: the running
summary with the conversation (after ``save_summary``, the next ``active`` has it), a
summary that cannot be one as none, and messages oldest first with their sizes; a
button press's claim as one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.collections import ensure_indexes
from storage.repos.conversation_record import Conversation, StoredMessage, Summary
from storage.repos.conversations import ConversationRepo, MessageRepo
from storage.repos.press_claims import PressClaim, PressClaims

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
    read = await messages.recent(conv)
    assert [m._replace(created_at=None) for m in read] == [
        StoredMessage(0, "user", hello, 3),
        StoredMessage(1, "assistant", (), 0),
    ]
    assert all(m.created_at is not None for m in read)  # when each was said (summaries)


async def test_a_second_press_reads_what_the_first_did(db: AsyncDatabase[Doc]) -> None:
    """A press is claimed once; a second claim gets the first's message, time and what
    it did (the answer "Already done at 09:00: acknowledged")."""
    claims, now = PressClaims(db), datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    assert await claims.claim("press:t:1:9:a", "in-1", now, timedelta(days=30)) is None
    await claims.settle("press:t:1:9:a", "acknowledged")
    later = now + timedelta(minutes=5)
    again = await claims.claim("press:t:1:9:a", "in-2", later, timedelta(days=30))
    assert again == PressClaim("in-1", now, "acknowledged")
