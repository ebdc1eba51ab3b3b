"""A scheduled run's exchange is stored in an insert of its own (``MessageRepo.append``
with ``alone``, past the group commit) with the group commit's guarantees: it survives
a dropped connection once, each message stored once, and a clash of turns is an error,
never a silent interleaving."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError

from storage.collections import ensure_indexes
from storage.repos.conversations import MessageRepo
from tests.fakes.unheard_close import UnheardCloseRelay

Doc = dict[str, Any]


def _turns(*texts: str) -> list[Doc]:
    return [{"role": "user", "parts": [{"kind": "text", "text": text}]} for text in texts]


async def test_a_runs_exchange_is_stored_once_through_a_dropped_connection(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    db = bare_client[f"alone_{uuid.uuid4().hex[:8]}"]
    await ensure_indexes(db)
    learnt: list[int] = []
    messages = MessageRepo(db, lambda _conversation, docs: learnt.append(len(docs)))
    conversation = ObjectId()
    await messages.append(conversation, _turns("first"), start_seq=0, alone=True)
    await relay.quiet()  # the pooled connection is gone: the insert's first try fails
    assert relay.server_closes >= 1
    await messages.append(conversation, _turns("check the backups", "done"), 1, alone=True)
    stored = await messages.recent(conversation)
    assert [m.seq for m in stored] == [0, 1, 2]
    assert [m.parts[0]["text"] for m in stored] == ["first", "check the backups", "done"]
    assert learnt == [1, 2]  # recall heard of each exchange once, once stored


async def test_a_clash_of_turns_stored_alone_is_an_error_not_an_interleaving(
    bare_client: AsyncMongoClient[Doc],
) -> None:
    db = bare_client[f"alone_{uuid.uuid4().hex[:8]}"]
    await ensure_indexes(db)
    messages = MessageRepo(db)
    conversation = ObjectId()
    await messages.append(conversation, _turns("a", "b"), start_seq=0, alone=True)
    with pytest.raises(DuplicateKeyError):
        await messages.append(conversation, _turns("c", "d"), start_seq=1, alone=True)
    stored = await messages.recent(conversation)
    assert [(m.seq, m.parts[0]["text"]) for m in stored][:2] == [(0, "a"), (1, "b")]
