"""Exchanges of many chats ending together are stored in a few insert commands, each
conversation's turns in order, and a clash in one conversation fails only its writer."""

from __future__ import annotations

import asyncio
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.collections import ensure_indexes
from storage.repos.conversations import MessageRepo
from tests.storage.conftest import Commands

Doc = dict[str, Any]


def turn(text: str) -> list[Doc]:
    return [
        {"role": "user", "parts": [{"kind": "text", "text": text}]},
        {"role": "assistant", "parts": [{"kind": "text", "text": f"re: {text}"}]},
    ]


async def test_thirty_exchanges_at_once_are_a_few_inserts_in_order(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    await ensure_indexes(db)
    repo = MessageRepo(db)
    convs = [ObjectId() for _ in range(30)]
    await asyncio.gather(
        *(repo.append(conv, turn(f"hi {i}"), start_seq=0) for i, conv in enumerate(convs))
    )
    inserts = commands.named("insert")
    assert sum(inserts) == 60 and len(inserts) <= 5, inserts
    for i, conv in enumerate(convs):
        stored = await repo.recent(conv)
        assert [d.seq for d in stored] == [0, 1]
        assert [d.parts[0]["text"] for d in stored] == [f"hi {i}", f"re: hi {i}"]


async def test_a_seq_clash_fails_its_own_writer_only(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, _commands = watched
    await ensure_indexes(db)
    repo = MessageRepo(db)
    clashing, fine = ObjectId(), ObjectId()
    await repo.append(clashing, turn("first"), start_seq=0)
    results = await asyncio.gather(
        repo.append(clashing, turn("again"), start_seq=0),  # seq 0 and 1 are taken
        repo.append(fine, turn("hello"), start_seq=0),
        return_exceptions=True,
    )
    assert isinstance(results[0], DuplicateKeyError)
    assert results[1] is None
    assert [d.parts[0]["text"] for d in await repo.recent(fine)] == ["hello", "re: hello"]
    assert await db[c.MESSAGES].count_documents({"conversation_id": clashing}) == 2
