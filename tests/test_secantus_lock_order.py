"""``tests/secantus_lock_order.py``: an insert creating a collection and a ``create`` or
``createIndexes`` of the same collection at the same moment both finish (unpatched,
SecantusDB hung for good on the first try), and creation answers as before.

A server of the test's own (patched, as every server in the test process is by
``tests/conftest.py``), so a regression fails here instead of hanging the shared one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import CollectionInvalid

from tests.secantus_lock_order import patch

Doc = dict[str, Any]
ROUNDS = 15
WITHIN = 10.0


@pytest.fixture
def dbs(tmp_path: Path) -> Iterator[tuple[Database[Doc], Database[Doc]]]:
    """Two clients of one fresh server: two connections, two server threads."""
    from secantus import SecantusDBServer

    server = SecantusDBServer(host="127.0.0.1", port=0, storage_path=str(tmp_path / "db"))
    server.start()
    uri = f"mongodb://127.0.0.1:{server.port}/?directConnection=true"
    clients: list[MongoClient[Doc]] = [MongoClient(uri, retryWrites=False) for _ in range(2)]
    try:
        yield clients[0]["t"], clients[1]["t"]
    finally:
        for client in clients:
            client.close()
        server.stop()


def race(first: Callable[[], object], second: Callable[[], object]) -> None:
    """Both at once; each must end within ``WITHIN`` seconds."""
    errors: list[BaseException] = []

    def run(step: Callable[[], object]) -> None:
        try:
            step()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WITHIN)
    assert not any(t.is_alive() for t in threads), "the database hung"
    assert errors == []


def inserting(db: Database[Doc], name: str) -> Callable[[], object]:
    return lambda: [db[name].insert_one({"n": n}) for n in range(5)]


def test_an_insert_and_a_create_of_one_new_collection_both_finish(
    dbs: tuple[Database[Doc], Database[Doc]],
) -> None:
    writer, ddl = dbs

    def create(name: str) -> Callable[[], object]:
        def step() -> None:
            with contextlib.suppress(CollectionInvalid):  # the insert made it first
                ddl.create_collection(name)

        return step

    for r in range(ROUNDS):
        name = f"ai_notes_{r}"
        race(inserting(writer, name), create(name))
        assert writer[name].count_documents({}) == 5


def test_an_insert_and_an_index_of_one_new_collection_both_finish(
    dbs: tuple[Database[Doc], Database[Doc]],
) -> None:
    writer, ddl = dbs
    for r in range(ROUNDS):
        name = f"ai_tasks_{r}"
        race(inserting(writer, name), lambda name=name: ddl[name].create_index("n"))
        assert writer[name].count_documents({"n": {"$gte": 0}}) == 5
        assert "n_1" in ddl[name].index_information()
        # The index holds the rows the insert wrote, whichever went first.
        assert len(list(ddl[name].find({"n": 3}).hint("n_1"))) == 1


def test_creation_answers_as_before(dbs: tuple[Database[Doc], Database[Doc]]) -> None:
    db, _ = dbs
    db.create_collection("ai_once", validator={"$jsonSchema": {"required": ["n"]}})
    with pytest.raises(CollectionInvalid):
        db.create_collection("ai_once")  # NamespaceExists, as MongoDB answers
    assert db["ai_once"].options()["validator"] == {"$jsonSchema": {"required": ["n"]}}
    db.command("collMod", "ai_once", validator={"$jsonSchema": {"required": ["m"]}})
    assert db["ai_once"].options()["validator"] == {"$jsonSchema": {"required": ["m"]}}


def test_a_changed_secantus_is_refused_and_patching_twice_is_harmless() -> None:
    class Changed:
        def _coll_lock(self, db: str, coll: str) -> None: ...

        def create_collection(self, db: str, coll: str) -> None: ...

    with pytest.raises(RuntimeError, match="set_collection_options no longer there"):
        patch(Changed)

    from secantus.storage import Storage

    assert patch(Storage) is False  # tests/conftest.py did it already
