"""Chats whose messages arrive together open their conversations in a few commands, not
one each; existing conversations are found again, new ones are told apart, and a
failed batch fails each of its callers, not the next batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.coalesce import GroupLoad
from storage.collections import ensure_indexes
from storage.repos.conversations import ConversationRepo
from tests.storage.conftest import Commands

Doc = dict[str, Any]


def conversation_commands(commands: Commands) -> list[str]:
    return [
        name for name, _n in commands.sent if name in ("find", "findAndModify", "insert", "update")
    ]


async def test_fifty_new_chats_at_once_open_in_a_few_commands(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    await ensure_indexes(db)
    commands.sent.clear()
    repo = ConversationRepo(db)
    keys = [f"telegram:{i}" for i in range(50)]
    convs = await asyncio.gather(*(repo.active(k, channel="telegram", chat_id=k[9:]) for k in keys))
    assert len(conversation_commands(commands)) <= 8, commands.sent
    assert [conv.key for conv in convs] == keys
    assert len({conv.id for conv in convs}) == 50
    assert all(repo.take_created(conv.id) for conv in convs)
    assert await db[c.CONVERSATIONS].count_documents({"active": True}) == 50
    stored = await db[c.CONVERSATIONS].find_one({"key": "telegram:7"})
    assert stored is not None and stored["channel"] == "telegram" and stored["chat_id"] == "7"

    again = ConversationRepo(db)  # after a restart: the same conversations, none new
    found = await asyncio.gather(*(again.active(k) for k in keys))
    assert [conv.id for conv in found] == [conv.id for conv in convs]
    assert not any(again.take_created(conv.id) for conv in found)
    assert await db[c.CONVERSATIONS].count_documents({}) == 50


async def test_a_batch_mixing_known_and_new_chats(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, _commands = watched
    await ensure_indexes(db)
    known = await ConversationRepo(db).active("telegram:known")
    repo = ConversationRepo(db)
    keys = ["telegram:known", *(f"telegram:new{i}" for i in range(10)), "telegram:known"]
    convs = await asyncio.gather(*(repo.active(k) for k in keys))
    assert convs[0].id == convs[-1].id == known.id
    assert not repo.take_created(known.id)
    assert all(repo.take_created(conv.id) for conv in convs[1:-1])
    assert await db[c.CONVERSATIONS].count_documents({}) == 11


async def test_a_failed_batch_fails_its_callers_and_the_next_one_works() -> None:
    calls: list[list[str]] = []
    fail = True
    gate = asyncio.Event()

    async def one(key: str, _arg: None) -> str:
        await gate.wait()
        return f"one:{key}"

    async def many(items: Sequence[tuple[str, None]]) -> dict[str, str]:
        calls.append([key for key, _ in items])
        if fail:
            raise ConnectionError("database gone")
        return {key: f"many:{key}" for key, _ in items}

    load: GroupLoad[str, None, str] = GroupLoad(one, many)
    first = asyncio.create_task(load("a", None))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(load(k, None)) for k in ("b", "c", "b")]
    await asyncio.sleep(0)
    gate.set()
    assert await first == "one:a"
    for task in queued:
        with pytest.raises(ConnectionError):
            await task
    assert calls == [["b", "c"]]  # one batch; "b" asked twice, loaded once

    fail = False
    gate.clear()
    first = asyncio.create_task(load("d", None))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(load(k, None)) for k in ("e", "f")]
    await asyncio.sleep(0)
    gate.set()
    assert [await first, *(await asyncio.gather(*queued))] == ["one:d", "many:e", "many:f"]
