"""Group commit on a real database: a burst of writes is a few commands, each caller
still gets its own outcome, and a lone write goes at once."""

from __future__ import annotations

import asyncio
from typing import Any

from bson.errors import InvalidDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage.coalesce import GroupCommit, insert_each, set_all, set_each
from tests.storage.conftest import Commands
from tests.waiting import until, waiting_in

Doc = dict[str, Any]


async def test_a_burst_of_done_updates_is_a_few_commands_and_all_land(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    n = 60
    ids = (await db["items"].insert_many([{"status": "processing"} for _ in range(n)])).inserted_ids
    mark_done = GroupCommit(set_all(db["items"], lambda: {"status": "done"}))
    commands.sent.clear()
    await asyncio.gather(*(mark_done([i]) for i in ids))
    updates = commands.named("update")
    assert len(updates) <= 3, updates  # one alone, then the rest together
    assert await db["items"].count_documents({"status": "done"}) == n


async def test_sends_recorded_together_keep_their_own_fields(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    ids = (await db["sends"].insert_many([{"status": "sending"} for _ in range(30)])).inserted_ids
    mark_sent = GroupCommit(set_each(db["sends"]))
    commands.sent.clear()
    await asyncio.gather(
        *(mark_sent((key, {"status": "sent", "external_ids": [n]})) for n, key in enumerate(ids))
    )
    assert len(commands.named("update")) <= 3
    stored = {d["_id"]: d async for d in db["sends"].find()}
    assert [stored[key]["external_ids"] for key in ids] == [[n] for n in range(30)]
    assert {d["status"] for d in stored.values()} == {"sent"}


async def test_each_insert_hears_its_own_duplicate(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    await db["items"].create_index("key", unique=True)
    await db["items"].insert_one({"key": "seen"})
    store = GroupCommit(insert_each(db["items"]))
    keys = ["first", *(f"k{n}" for n in range(20)), "seen", "k3"]
    commands.sent.clear()
    outcomes = await asyncio.gather(*(store({"key": k}) for k in keys), return_exceptions=True)
    duplicates = [
        k for k, o in zip(keys, outcomes, strict=True) if isinstance(o, DuplicateKeyError)
    ]
    assert duplicates == ["seen", "k3"]  # the second "k3" only; every other one stored
    assert all(o is None for k, o in zip(keys, outcomes, strict=True) if k not in duplicates)
    assert len(commands.named("insert")) == 2
    assert await db["items"].count_documents({}) == 1 + 21


async def test_a_batch_that_fails_falls_back_to_each_item_alone(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, _commands = watched
    inner = insert_each(db["items"])
    tried: list[int] = []

    async def write(docs: list[Doc]) -> Any:
        tried.append(len(docs))
        return await inner(docs)

    store = GroupCommit(write)
    docs: list[Doc] = [{"n": n} for n in range(10)]
    docs[5]["bad"] = object()  # cannot be encoded: the whole insert command fails
    outcomes = await asyncio.gather(*(store(d) for d in docs), return_exceptions=True)
    assert tried == [1, 9, *[1] * 9]  # the first alone, the batch, then each alone
    assert isinstance(outcomes[5], InvalidDocument)
    assert [o for n, o in enumerate(outcomes) if n != 5] == [None] * 9
    stored = [d["n"] async for d in db["items"].find()]
    assert sorted(stored) == [n for n in range(10) if n != 5]


async def test_a_lone_write_goes_at_once(watched: tuple[AsyncDatabase[Doc], Commands]) -> None:
    db, commands = watched
    ids = (await db["items"].insert_many([{"status": "processing"} for _ in range(5)])).inserted_ids
    written: list[list[Any]] = []
    inner = set_all(db["items"], lambda: {"status": "done"})

    async def write(items: list[Any]) -> None:
        written.append(items)
        await inner(items)

    mark_done = GroupCommit(write)
    commands.sent.clear()
    for key in ids:
        task = asyncio.create_task(mark_done([key]))
        await asyncio.sleep(0)  # one step of the loop: the write has started, unbatched
        assert written[-1] == [[key]]
        await task
    assert commands.named("update") == [1] * 5  # one command each, none waited for company
    assert await db["items"].count_documents({"status": "done"}) == 5


async def test_a_write_in_a_crowd_waits_for_company(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    ids = (await db["items"].insert_many([{"status": "sent"} for _ in range(12)])).inserted_ids
    # Long enough that a busy machine adds the others while the first still waits.
    mark_done = GroupCommit(set_all(db["items"], lambda: {"status": "done"}), linger=2.0)
    commands.sent.clear()
    first = asyncio.create_task(mark_done([ids[0]], crowded=True))
    await until(lambda: waiting_in("GroupCommit.__call__"), "the first write lingering")
    assert commands.named("update") == []  # waiting for company, though none is in flight
    later = [asyncio.create_task(mark_done([key], crowded=True)) for key in ids[1:]]
    await asyncio.gather(first, *later)
    assert commands.named("update") == [1]  # all twelve in one command
    assert await db["items"].count_documents({"status": "done"}) == 12
    # With no company in sight a write goes at once, linger or not.
    patient = GroupCommit(set_all(db["items"], lambda: {"status": "done"}), linger=3600)
    commands.sent.clear()
    async with asyncio.timeout(30):  # watchdog: lingering would take an hour
        await patient([ids[0]])
    assert commands.named("update") == [1]


async def test_flush_writes_what_lingers_at_once_even_for_a_cancelled_caller(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    ids = (await db["items"].insert_many([{"status": "sent"} for _ in range(3)])).inserted_ids
    mark_done = GroupCommit(set_all(db["items"], lambda: {"status": "done"}), linger=3600)
    waiting = [asyncio.create_task(mark_done([key], crowded=True)) for key in ids]
    await until(lambda: waiting_in("GroupCommit.__call__") == 3, "all three lingering")
    waiting[0].cancel()  # a worker stopped mid-way: its write still goes
    await asyncio.wait_for(mark_done.flush(), 30)  # not after the hour's linger
    assert await db["items"].count_documents({"status": "done"}) == 3
    assert commands.named("update")[-1:] == [1]
    await asyncio.gather(*waiting[1:])
    await mark_done.flush()  # nothing waiting: returns at once
