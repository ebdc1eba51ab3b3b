"""One more try for a write cut off by a dropped connection, made safe to repeat.

We connect with ``retryWrites=False`` (``storage.db``: SecantusDB slows down ~15x with
retryable writes), so pymongo never sends a write again, and a connection can drop
under any write: the server restarts, or it closes a connection it found idle. Reads
need nothing from here: pymongo retries them itself (``retryReads`` is on).

A dropped connection leaves it unknown whether the server applied the write, so a
write is sent again only where applying it twice is the same as applying it once:

* ``retried`` repeats any call; its caller vouches at the call site that the call is
  idempotent (``$set`` by a key, an upsert on a unique key, a compare-and-set whose
  filter the first try would already have made false);
* ``insert`` and ``insert_many`` fix each document's ``_id`` before the first try,
  so the retry can tell a document the first try stored (its own ``_id`` is there)
  from a real duplicate;
* ``claim`` (a ``find_one_and_update`` that takes one document) tags what it takes
  with a fresh token and on the retry first looks for that token: the first try may
  have taken a document whose reply was lost, and taking a second one would strand it.

One retry only: a second failure in a row means the database is down, which the
caller has to handle (the scheduler tries a fire again within its grace window).
``ServerSelectionTimeoutError`` is never retried: it has already waited for a server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    DuplicateKeyError,
    ServerSelectionTimeoutError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Doc = dict[str, Any]
CLAIM_FIELD = "claim_id"
"""Set by ``claim`` on the document it takes: the token of the claim that took it."""
INSERT_FIELD = "insert_id"
"""Set on a document whose ``_id`` is its own key (``storage.coalesce.insert_each``
with ``keyed``): which insert stored it, so a retry can tell its own copy from another."""


def transient(exc: BaseException) -> bool:
    """A connection that dropped under a call (a retry may well succeed)."""
    return isinstance(exc, AutoReconnect) and not isinstance(exc, ServerSelectionTimeoutError)


def unreachable(exc: BaseException) -> bool:
    """The database could not be reached: a dropped connection or no server at all."""
    return isinstance(exc, ConnectionFailure)


def _note(what: str, exc: BaseException) -> None:
    log.warning("%s: connection lost (%s); trying once more", what, exc)


async def retried(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``call()``, and once more if its connection dropped. ``call`` must be idempotent."""
    try:
        return await call()
    except AutoReconnect as exc:
        if not transient(exc):
            raise
        _note(what, exc)
    return await call()


async def insert(coll: AsyncCollection[Doc], doc: Doc, **options: Any) -> None:
    """``insert_one``, retried. A duplicate key on the retry is success when the stored
    document carries our ``_id`` (the first try landed); otherwise it is raised."""
    doc.setdefault("_id", ObjectId())
    try:
        await coll.insert_one(doc, **options)
        return
    except AutoReconnect as exc:
        if not transient(exc):
            raise
        _note(f"insert into {coll.name}", exc)
    try:
        await coll.insert_one(doc, **options)
    except DuplicateKeyError:
        if await coll.find_one({"_id": doc["_id"]}, projection={"_id": 1}) is None:
            raise


async def insert_new(
    coll: AsyncCollection[Doc], doc: Doc, new_id: Callable[[], str], attempts: int = 5
) -> bool:
    """``doc`` inserted under a fresh short ``_id`` from ``new_id`` (a few hex digits a
    person can type), drawn again on a clash; False when ``attempts`` draws all clashed."""
    for _ in range(attempts):
        doc["_id"] = new_id()
        try:
            await insert(coll, doc)  # a retry finds its own id stored
        except DuplicateKeyError:
            continue
        return True
    return False


async def insert_many(
    coll: AsyncCollection[Doc], docs: Sequence[Doc], *, ordered: bool = True, **options: Any
) -> None:
    """``insert_many``, retried: the retry inserts only the documents whose ``_id``
    the first try did not store."""
    if not docs:
        return
    for doc in docs:
        doc.setdefault("_id", ObjectId())
    try:
        await coll.insert_many(docs, ordered=ordered, **options)
        return
    except AutoReconnect as exc:
        if not transient(exc):
            raise
        _note(f"insert into {coll.name}", exc)
    ids = [doc["_id"] for doc in docs]
    stored = {d["_id"] async for d in coll.find({"_id": {"$in": ids}}, projection={"_id": 1})}
    rest = [doc for doc in docs if doc["_id"] not in stored]
    if rest:
        await coll.insert_many(rest, ordered=ordered, **options)


async def claim(
    coll: AsyncCollection[Doc],
    query: Mapping[str, Any],
    update: Mapping[str, Any],
    *,
    sort: Sequence[tuple[str, int]] | None = None,
    upsert: bool = False,
) -> Doc | None:
    """``find_one_and_update`` returning the document after the change, applied at most
    once: the change carries a fresh token, and the retry first looks the token up."""
    token = ObjectId()
    tagged = {**update, "$set": {**update.get("$set", {}), CLAIM_FIELD: token}}

    async def take() -> Doc | None:
        return await coll.find_one_and_update(
            dict(query), tagged, sort=sort, upsert=upsert, return_document=ReturnDocument.AFTER
        )

    try:
        return await take()
    except AutoReconnect as exc:
        if not transient(exc):
            raise
        _note(f"update in {coll.name}", exc)
    taken = await coll.find_one({CLAIM_FIELD: token})
    return taken if taken is not None else await take()
