"""A conversation this process just created has no history to read: its first exchange
skips that read, once; any other conversation (existing, or made by another process)
is read as before."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.collections import ensure_indexes
from storage.repos.conversations import ConversationRepo
from tests.storage.conftest import Commands

Doc = dict[str, Any]


async def test_only_the_call_that_created_it_says_so(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, _commands = watched
    await ensure_indexes(db)
    repo = ConversationRepo(db)
    conv = await repo.active("telegram:1", channel="telegram", chat_id="1")
    assert repo.take_created(conv.id) is True
    assert repo.take_created(conv.id) is False  # asked once: the next exchange reads

    again = await repo.active("telegram:1")  # cached, the same conversation
    assert again.id == conv.id and repo.take_created(conv.id) is False


async def test_a_conversation_made_before_is_not_new(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, _commands = watched
    await ensure_indexes(db)
    made = await ConversationRepo(db).active("telegram:2")
    restarted = ConversationRepo(db)  # another process, or this one after a restart
    found = await restarted.active("telegram:2")
    assert found.id == made.id
    assert restarted.take_created(found.id) is False
