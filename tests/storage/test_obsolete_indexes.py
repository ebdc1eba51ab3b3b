"""Indexes an earlier version built and nothing reads any more are dropped when the
database opens (every write paid for them); a new store opens without them."""

from __future__ import annotations

from pathlib import Path

from storage import collections as c
from storage.collections import OBSOLETE
from storage.db import open_database


async def test_an_upgraded_store_loses_its_obsolete_indexes(
    mongo_server: str, tmp_path: Path
) -> None:
    async with open_database(mongo_server, "upgraded", tmp_path) as database:
        messages = database.db[c.MESSAGES]
        await messages.create_index("inbox_id", sparse=True)  # as versions before built it
        await messages.insert_one({"conversation_id": 1, "seq": 0, "inbox_id": "x"})
        assert "inbox_id_1" in await messages.index_information()

    async with open_database(mongo_server, "upgraded", tmp_path) as database:
        messages = database.db[c.MESSAGES]
        names = set(await messages.index_information())
        assert names.isdisjoint(OBSOLETE[c.MESSAGES])
        assert "conversation_id_1_seq_1" in names
        assert await messages.count_documents({"inbox_id": "x"}) == 1  # nothing else lost


async def test_a_new_store_opens_with_nothing_to_drop(mongo_server: str, tmp_path: Path) -> None:
    async with open_database(mongo_server, "fresh", tmp_path) as database:
        names = set(await database.db[c.MESSAGES].index_information())
        assert names.isdisjoint(OBSOLETE[c.MESSAGES])
