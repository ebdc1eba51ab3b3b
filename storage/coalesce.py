"""Concurrent callers sharing database work: writes of one kind share a command, reads
of one kind share a query, and small documents read on every exchange are remembered.

Group commit (``GroupCommit``): the embedded server pays a large fixed cost per
command, so under a burst the writes that queue up behind the one in flight go together
in ONE command as soon as it returns. A lone write goes at once (nothing waits for
company), so an idle process sees no delay, and a burst needs a handful of commands
instead of one each. A write given a ``linger`` waits that long for company even when
nothing is in flight: for writes no reply waits on (``BOOKKEEPING_LINGER``). Each caller
still awaits its own write and gets its own outcome: ``write`` returns one outcome per
item (``None``, or the exception that item's own write would have raised, say a
``DuplicateKeyError``). If the command for a batch fails as a whole, each item is
written again alone, so one bad document cannot fail the others; only an unreachable
database fails them all at once (writing each alone would only wait for it once per
item).

Group load (``GroupLoad``), the read-side twin: a lone load goes at once with its own
query; loads that queue up behind it go together, as soon as it returns, in one call of
``load_many`` (a query by ``$in``, say). Each caller gets its own value or error;
callers asking for the same key in one batch share its answer.

A read-through cache (``TtlCache``), owned by the repository that writes the document,
so every write through it invalidates at once; a write by another process is seen
within ``ttl`` seconds. Used only for data where that short lag is harmless (the system
instruction, the pulse settings shown in the prompt, the active conversation of a
chat). Concurrent misses of one key share one load (a burst of chats arriving together
reads the document once, not once each). An ``invalidate`` during a load makes later
callers load afresh, and the stale answer is not kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from bson import ObjectId
from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteError

from storage import retry

I = TypeVar("I")  # noqa: E741 - the item type
K = TypeVar("K", bound=Hashable)
A = TypeVar("A")  # what a caller passes besides the key
V = TypeVar("V")
R = TypeVar("R")  # a load's raw answer, before it is parsed
Doc = dict[str, Any]

# Group commit.

Outcomes = Sequence[BaseException | None] | None
"""Per item, in order: None (written) or its own error; None as a whole: all written."""
BatchWrite = Callable[[list[I]], Awaitable[Outcomes]]
MAX_ITEMS = 200
"""At most this many items in one command (a command stays far below 16 MB)."""
BOOKKEEPING_LINGER = 0.03
"""How long a write that answers nobody waits for company while other exchanges are in
flight: a handled message's "done" mark. Under a burst they come one every few ms, as
answers arrive, and then share a command instead of going one or two at a time. A write
with no company in sight goes at once. Not for a sent reply's record: a crash while it
waits would have the reply sent again (``channels.delivery.outbox``)."""


class GroupCommit(Generic[I]):
    """One command in flight at a time; items queued meanwhile go in the next one."""

    def __init__(
        self, write: BatchWrite[I], *, max_items: int = MAX_ITEMS, linger: float = 0.0
    ) -> None:
        self._write = write
        self._max = max_items
        self._linger = linger
        self._queue: list[tuple[I, asyncio.Future[None]]] = []
        self._busy = False
        self._drain: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def __call__(self, item: I, *, crowded: bool = False) -> None:
        """Write ``item`` (alone at once when nothing is in flight, else with the queue).

        ``crowded``: more writes like this one are on their way (other exchanges are in
        flight); with a ``linger``, the write then waits that long for them first."""
        if self._busy or (crowded and self._linger):
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            self._queue.append((item, done))
            if not self._busy:  # lingering: the first write waits for company
                self._busy = True
                self._timer = loop.call_later(self._linger, self._start)
            await done
            return
        self._busy = True
        try:
            outcomes = await self._write([item])  # alone, at once (as ``_alone``, inline)
            if outcomes is not None and outcomes[0] is not None:
                raise outcomes[0]
        finally:
            self._busy = False
            if self._queue:
                self._busy = True
                self._start()

    def _start(self) -> None:
        """Write the queue, in a task of its own (``busy`` is set)."""
        self._timer = None
        self._drain = asyncio.create_task(self._run(), name="group commit")

    async def flush(self) -> None:
        """Write what is lingering now and wait for it (stopping: nothing is left behind,
        even for a caller that was cancelled meanwhile)."""
        if self._timer is not None:
            self._timer.cancel()
            self._start()
        if self._drain is not None and not self._drain.done():
            await asyncio.wait([self._drain])  # neither raises nor cancels it

    async def _alone(self, item: I) -> None:
        outcomes = await self._write([item])
        if outcomes is not None and outcomes[0] is not None:
            raise outcomes[0]

    async def _run(self) -> None:
        batch: list[tuple[I, asyncio.Future[None]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
                for (_item, done), outcome in zip(batch, await self._batch(batch), strict=True):
                    if done.done():
                        continue  # its caller was cancelled; the write went anyway
                    if outcome is None:
                        done.set_result(None)
                    else:
                        done.set_exception(outcome)
                batch = []
        finally:
            self._busy = False
            for _item, done in batch + self._queue:  # cancelled: nobody hears a result
                done.cancel()
            self._queue = []

    async def _batch(
        self, batch: list[tuple[I, asyncio.Future[None]]]
    ) -> list[BaseException | None]:
        items = [item for item, _done in batch]
        try:
            outcomes = await self._write(items)
        except Exception as exc:
            if len(items) == 1 or retry.unreachable(exc):
                return [exc] * len(items)
            return [await self._fallback(item) for item in items]
        return list(outcomes) if outcomes is not None else [None] * len(items)

    async def _fallback(self, item: I) -> BaseException | None:
        try:
            await self._alone(item)
        except Exception as exc:
            return exc
        return None


def insert_each(coll: AsyncCollection[Doc], *, keyed: bool = False) -> BatchWrite[Doc]:
    """Inserts as one unordered ``insert``, each document's duplicate key its own error.

    Each document gets its ``_id`` before the first try, so a duplicate whose ``_id`` is
    stored is the document's own earlier copy (a retry after a dropped connection, or
    a failed batch that stored part of itself): that is success, as in ``retry.insert``.
    The server may report such a copy on any unique index, so the ``_id``s of the
    duplicates are looked up (one ``find``, only when there are duplicates).

    ``keyed``: the caller sets each ``_id`` to the document's own key
    (``storage.collections``), so a stored ``_id`` may be another document's, even one
    in the same batch. Each document then also carries a fresh token
    (``retry.INSERT_FIELD``), and only a stored copy with its token is its own.
    """

    async def write(docs: list[Doc]) -> Outcomes:
        for doc in docs:
            doc.setdefault("_id", ObjectId())
            if keyed:
                doc.setdefault(retry.INSERT_FIELD, ObjectId())
        try:
            await retry.retried(lambda: coll.insert_many(docs, ordered=False), "insert")
        except BulkWriteError as exc:
            return await own_copies(coll, docs, exc, keyed=keyed)
        return None

    return write


async def own_copies(
    coll: AsyncCollection[Doc], docs: list[Doc], exc: BulkWriteError, *, keyed: bool = False
) -> list[BaseException | None]:
    """Each document's outcome of an unordered insert of ``docs`` (their ``_id`` set
    before the first try) that raised ``exc``: None where it is stored, the stored copy
    being its own (see ``insert_each``), else its own error."""
    errors = _errors(exc)
    clashes = {i: docs[i]["_id"] for i, e in errors.items() if isinstance(e, DuplicateKeyError)}
    if clashes:
        query = {"_id": {"$in": list(set(clashes.values()))}}
        found = coll.find(query, projection={retry.INSERT_FIELD: 1})
        stored = {d["_id"]: d.get(retry.INSERT_FIELD) async for d in found}
        for i, key in clashes.items():
            if key in stored and (not keyed or stored[key] == docs[i][retry.INSERT_FIELD]):
                errors[i] = None  # stored by an earlier try
    return [errors.get(i) for i in range(len(docs))]


def _errors(exc: BulkWriteError) -> dict[int, BaseException | None]:
    """Each failed document's own error, by its index in the insert."""
    errors: dict[int, BaseException | None] = {}
    for err in exc.details.get("writeErrors", []):
        code, message = err.get("code"), str(err.get("errmsg", ""))
        kind = DuplicateKeyError if code == 11000 else WriteError
        errors[int(err["index"])] = kind(message, code, err)
    return errors


def set_each(coll: AsyncCollection[Doc]) -> BatchWrite[tuple[Any, Doc]]:
    """``(_id, fields)`` pairs, each a ``$set`` by ``_id``: one ``update`` command
    carrying one statement per pair. Safe to repeat, so retried once."""

    async def write(items: list[tuple[Any, Doc]]) -> Outcomes:
        ops = [UpdateOne({"_id": key}, {"$set": fields}) for key, fields in items]
        try:
            await retry.retried(lambda: coll.bulk_write(ops, ordered=False), "update")
        except BulkWriteError as exc:  # unordered: the other statements were applied
            failed = {e["index"]: e for e in exc.details.get("writeErrors", [])}
            if not failed:
                raise
            return [
                WriteError(str(e.get("errmsg", "")), e.get("code"), e) if e else None
                for e in (failed.get(i) for i in range(len(items)))
            ]
        return None

    return write


def set_all(coll: AsyncCollection[Doc], fields: Callable[[], Doc]) -> BatchWrite[Sequence[Any]]:
    """Groups of ``_id``s that all get the same ``$set`` (``fields()`` when written):
    one ``update_many`` by ``_id: {$in}``. Safe to repeat, so retried once."""

    async def write(items: list[Sequence[Any]]) -> Outcomes:
        ids = [key for keys in items for key in keys]
        change = {"$set": fields()}
        await retry.retried(lambda: coll.update_many({"_id": {"$in": ids}}, change), "update")
        return None

    return write


def insert_groups(coll: AsyncCollection[Doc]) -> BatchWrite[list[Doc]]:
    """Lists of documents (one caller's each, say one exchange's turns) as one unordered
    insert, as ``insert_each``; a list's outcome is the first error among its documents.

    Unordered: if one document of a list fails, the others are still stored (an ordered
    insert would stop there). Callers whose documents can only clash by a bug (the
    messages' ``seq``, one writer per conversation) see the error either way."""
    each = insert_each(coll)

    async def write(groups: list[list[Doc]]) -> Outcomes:
        outcomes = await each([doc for group in groups for doc in group])
        if outcomes is None:
            return None
        found: list[BaseException | None] = []
        start = 0
        for group in groups:
            errors = [e for e in outcomes[start : start + len(group)] if e is not None]
            found.append(errors[0] if errors else None)
            start += len(group)
        return found

    return write


# Group load.

LoadOne = Callable[[K, A], Awaitable[V]]
LoadMany = Callable[[Sequence[tuple[K, A]]], Awaitable[Mapping[K, V]]]
MAX_KEYS = 200


class GroupLoad(Generic[K, A, V]):
    def __init__(
        self, load_one: LoadOne[K, A, V], load_many: LoadMany[K, A, V], *, max_keys: int = MAX_KEYS
    ) -> None:
        self._one = load_one
        self._many = load_many
        self._max = max_keys
        self._queue: dict[K, tuple[A, list[asyncio.Future[V]]]] = {}
        self._busy = False
        self._drain_task: asyncio.Task[None] | None = None  # held: the loop keeps weak refs

    async def __call__(self, key: K, arg: A) -> V:
        if self._busy:
            done: asyncio.Future[V] = asyncio.get_running_loop().create_future()
            self._queue.setdefault(key, (arg, []))[1].append(done)
            return await done
        self._busy = True
        try:
            return await self._one(key, arg)
        finally:
            self._busy = False
            if self._queue:
                self._busy = True
                self._drain_task = asyncio.create_task(self._drain(), name="group load")

    async def _drain(self) -> None:
        try:
            while self._queue:
                keys = list(self._queue)[: self._max]
                batch = {key: self._queue.pop(key) for key in keys}
                try:
                    found = await self._many([(key, arg) for key, (arg, _w) in batch.items()])
                except Exception as exc:
                    for _arg, waiters in batch.values():
                        _settle(waiters, exc)
                    continue
                for key, (_arg, waiters) in batch.items():
                    if key in found:
                        _settle(waiters, found[key])
                    else:
                        _settle(waiters, KeyError(f"group load: nothing for {key!r}"))
        finally:
            self._busy = False
            for _arg, waiters in self._queue.values():  # cancelled: nobody hears a result
                for waiter in waiters:
                    waiter.cancel()
            self._queue = {}


def _settle(waiters: list[asyncio.Future[V]], outcome: V | Exception) -> None:
    for waiter in waiters:
        if waiter.done():
            continue  # its caller was cancelled
        if isinstance(outcome, Exception):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


# The read-through cache.


def _itself(value: V) -> V:
    return value


class TtlCache(Generic[K, V]):
    def __init__(
        self, ttl: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}

    def get(self, key: K, load: Callable[[], Awaitable[V]]) -> Awaitable[V]:
        """The value for ``key``: a fresh one at once (a finished future, nothing to
        wait in), else ``load``'s, shared with a load of it in flight."""
        return self.read(key, load, _itself)

    def read(
        self, key: K, query: Callable[[], Awaitable[R]], parse: Callable[[R], V]
    ) -> Awaitable[V]:
        """As ``get``, loading with a database call (``query``, the driver's own
        awaitable) and a plain ``parse`` of its answer: a miss waits in the driver
        alone, with no loader of ours in between."""
        hit = self._entries.get(key)
        if hit is not None and self._clock() - hit[0] < self._ttl:
            found: asyncio.Future[V] = asyncio.get_running_loop().create_future()
            found.set_result(hit[1])
            return found
        return self._fetch(key, query, parse)

    async def _fetch(self, key: K, query: Callable[[], Awaitable[R]], parse: Callable[[R], V]) -> V:
        while True:
            now = self._clock()
            hit = self._entries.get(key)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
            pending = self._loading.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not pending.cancelled() or (task is not None and task.cancelling()):
                    raise  # this caller was cancelled, not the load it waited for
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            value = parse(await query())
        except BaseException as exc:
            self._settle(key, future, exc)
            raise
        if self._loading.get(key) is future:  # not invalidated meanwhile
            if len(self._entries) >= self._max:
                self._entries.clear()  # rare; cheaper than tracking recency
            self._entries[key] = (now, value)
        self._settle(key, future, value)
        return value

    def _settle(self, key: K, future: asyncio.Future[V], outcome: V | BaseException) -> None:
        if self._loading.get(key) is future:
            del self._loading[key]
        if isinstance(outcome, asyncio.CancelledError):
            future.cancel()  # waiters load for themselves (see ``get``)
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
        else:
            future.set_result(outcome)

    def invalidate(self, key: K | None = None) -> None:
        if key is None:
            self._entries.clear()
            self._loading.clear()
        else:
            self._entries.pop(key, None)
            self._loading.pop(key, None)
