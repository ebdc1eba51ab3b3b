"""The ``monitors`` collection: every read and write of it goes through ``MonitorRepo``.

Every change of state is a compare-and-set on the stored state; a heartbeat's ping
token is stored as its hash only; at most ``most`` monitors hold a numbered slot, one
per slot by a unique index (``scheduler.monitors.service``, points 3-5). The rules
(limits, settings, flap damping) are the scheduler's (``scheduler.monitors``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from runtime.clock import Clock
from storage import collections as c
from storage import retry
from storage.outside import outside_docs
from storage.records import Doc, each, parsed
from storage.repos.monitor_record import (
    Kind,
    Monitor,
    MonitorError,
    MonitorSettings,
    PageSeen,
    Reason,
    Word,
    stored_time,
    token_key,
)

log = logging.getLogger(__name__)
SLOT_ATTEMPTS = 20
"""Draws of a free slot before a create gives up (each loses only to a create that won)."""


class MonitorRepo:
    """The ``monitors`` collection: every read and write of it goes through here."""

    def __init__(self, db: AsyncDatabase[Doc], clock: Clock) -> None:
        self._coll = db[c.MONITORS]
        self._now = clock

    def _clock(self) -> datetime:
        return stored_time(self._now())

    async def upgrade(self, most: int) -> None:
        """Bring monitors stored by earlier versions up to date (repeatable): no
        readable token, a slot each (of ``most``), and what the owner was told."""
        if await self.forget_plain_tokens():
            log.info("monitors: readable ping tokens removed; their hashes are kept")
        await self.fill_slots(most)
        async for doc in self._coll.find({"told": {"$exists": False}}):
            if (was := parsed(doc, Monitor.from_doc, "monitor")) is not None:
                await self._note_told(was)  # an open alert was told down

    async def _note_told(self, was: Monitor) -> None:
        await retry.retried(  # a retry finds the filter false
            lambda: self._coll.update_one(
                {"_id": was.id, "told": {"$exists": False}},
                {"$set": {"told": was.told, "told_since": was.told_since}},
            ),
            "note what was told of a monitor",
        )

    async def forget_plain_tokens(self) -> int:
        """Drop the readable ping tokens earlier versions stored beside their hash (the
        hash alone finds the monitor, so their ping URLs keep working); how many."""
        done = await retry.retried(  # $unset: repeatable
            lambda: self._coll.update_many({"token": {"$exists": True}}, {"$unset": {"token": ""}}),
            "forget plain ping tokens",
        )
        return done.modified_count

    async def all(self) -> list[Monitor]:
        docs = await self._coll.find({}).sort([("created_at", 1), ("_id", 1)]).to_list(None)
        return each(docs, Monitor.from_doc, "monitor")

    async def find(self, monitor_id: Any) -> Monitor:
        """By id, or by name (any case); a clear error for neither."""
        if not isinstance(monitor_id, str) or not monitor_id.strip():
            raise MonitorError("monitor_id is required; use action 'list' to see the ids")
        wanted = monitor_id.strip()
        key = {"$or": [{"_id": wanted}, {"name_key": wanted.casefold()}]}
        if (doc := await self._coll.find_one(key)) is None:
            shown = wanted[:40]
            raise MonitorError(f"no monitor with id {shown!r}; use action 'list' to see the ids")
        return Monitor.from_doc(doc)

    async def reload(self, monitor_id: str) -> Monitor | None:
        doc = await self._coll.find_one({"_id": monitor_id})
        return None if doc is None else Monitor.from_doc(doc)

    async def name_free(self, name: str, own_id: str | None = None) -> None:
        """Raises ``MonitorError`` when another monitor has ``name`` (any case)."""
        other = await self._coll.find_one({"name_key": name.casefold()}, {"_id": 1})
        if other is not None and other["_id"] != own_id:
            raise MonitorError(f"there is already a monitor named {name!r}; choose another name")

    async def create(
        self, kind: Kind, settings: MonitorSettings, token: str | None, most: int
    ) -> Monitor:
        """A new ``kind`` monitor holding one of ``most`` slots; ``token``: a heartbeat's
        ping token (its hash stored, the token itself only on the answer)."""
        now = self._clock()
        doc: Doc = {
            **settings.stored(kind),
            "name_key": settings.name.casefold(),
            "kind": kind,
            "paused": False,
            "revision": 1,
            "state": "new",
            "failures": 0,
            "told": "up",
            "created_at": now,
            "watch_from": now,
        }
        if token is not None:
            doc["token_key"] = token_key(token)
        await self._insert_in_a_slot(doc, most)
        return replace(Monitor.from_doc(doc), token=token)

    async def _open_slots(self, most: int) -> list[int]:
        """The slot numbers below the cap that no monitor holds."""
        held = await self._coll.find({"slot": {"$exists": True}}, {"slot": 1}).to_list(None)
        taken = {d["slot"] for d in held}
        return [n for n in range(most) if n not in taken]

    async def _free_slots(self, most: int) -> list[int]:
        """The open slots; none while as many monitors as the cap exist (slotted or
        not: a store from before the slots may hold a few more)."""
        if await self._coll.count_documents({}) >= most:
            return []
        return await self._open_slots(most)

    async def _insert_in_a_slot(self, doc: Doc, most: int) -> None:
        """Insert ``doc`` holding one of the ``most`` slots, under a fresh id.

        The cap holds by construction, however many creates run at once: each monitor
        holds a slot number below the cap and a unique index allows one monitor per
        slot, so a create that loses a race for a slot (or an id) draws again among
        those still free, and finds none once the cap is reached."""
        for _ in range(SLOT_ATTEMPTS):
            free = await self._free_slots(most)
            if not free:
                raise MonitorError(
                    f"there are already {most} monitors, the most allowed; delete one first"
                )
            doc |= {"_id": secrets.token_hex(4), "slot": secrets.choice(free)}
            try:
                await retry.insert(self._coll, doc)  # a retry finds its own id stored
            except DuplicateKeyError:
                continue
            return
        raise MonitorError("too many monitors are being made at once; try again")

    async def fill_slots(self, most: int) -> None:
        """Give a slot to each monitor an earlier version made without one, while
        slots are free (repeatable; another process doing the same is fine)."""
        unslotted = self._coll.find({"slot": {"$exists": False}}, {"_id": 1})
        for doc in await unslotted.sort("created_at", 1).to_list(None):
            for _ in range(SLOT_ATTEMPTS):
                free = await self._open_slots(most)
                if not free:
                    return
                try:
                    await self._take_slot(doc["_id"], free[0])
                except DuplicateKeyError:
                    continue
                break

    async def _take_slot(self, monitor_id: str, slot: int) -> None:
        match = {"_id": monitor_id, "slot": {"$exists": False}}
        await retry.retried(  # a retry finds the filter false
            lambda: self._coll.update_one(match, {"$set": {"slot": slot}}),
            "give a monitor its slot",
        )

    async def change_settings(
        self, monitor: Monitor, settings: MonitorSettings, *, restart: bool, rebase: bool
    ) -> Monitor:
        """Store ``monitor``'s new ``settings`` (its revision raised). ``restart``: its
        count of failures starts again (a new url); ``rebase``: a ``change`` monitor's
        page is looked at afresh (a new url, selector or keyword)."""
        change = {**settings.stored(monitor.kind), "name_key": settings.name.casefold()}
        if restart:
            change |= {"failures": 0, "failing_since": None}
        if rebase:
            change |= {"page_hash": None, "page_text": None, "page_found": True}
        return await self._set(monitor.id, change, bump=True)

    async def _set(self, monitor_id: str, change: Doc, *, bump: bool = False) -> Monitor:
        update: Doc = {"$set": change}
        if bump:
            update["$inc"] = {"revision": 1}
        doc = await self._coll.find_one_and_update(  # not retried: $inc
            {"_id": monitor_id}, update, return_document=ReturnDocument.AFTER
        )
        if doc is None:
            raise MonitorError(f"monitor {monitor_id!r} was deleted meanwhile")
        return Monitor.from_doc(doc)

    async def set_paused(self, monitor: Monitor, paused: bool) -> Monitor:
        change: Doc = {"paused": paused}
        if paused:  # whatever it was, it starts again from nothing on resume
            change |= {"state": "new", "failures": 0, "failing_since": None}
            change |= {"down_since": None, "alert_code": None, "changes": []}
            change |= {"told": "up", "told_at": None, "told_since": None}
        else:
            change["watch_from"] = self._clock()
        return await self._set(monitor.id, change, bump=True)

    async def delete(self, monitor: Monitor) -> None:
        await retry.retried(  # by _id: repeatable
            lambda: self._coll.delete_one({"_id": monitor.id}), "delete a monitor"
        )

    async def by_token_key(self, key: str) -> Monitor | None:
        doc = await self._coll.find_one({"token_key": key})
        return None if doc is None else Monitor.from_doc(doc)

    # -- state ------------------------------------------------------------------------

    async def checked_ok(self, monitor: Monitor, at: datetime) -> Monitor | None:
        """A good check (or ping) while not down; None when it is down after all."""
        return await self._put(
            monitor,
            {"state": {"$ne": "down"}},
            state="up",
            failures=0,
            failing_since=None,
            last_check_at=at,
            last_error=None,
        )

    async def failed(self, monitor: Monitor, at: datetime, reason: Reason) -> Monitor | None:
        """One more failure in a row; ``failing_since`` is kept from the first."""
        return await self._put(
            monitor,
            {"failures": monitor.failures},
            failures=monitor.failures + 1,
            last_error=reason,
            failing_since=monitor.failing_since or at,
            last_check_at=at,
        )

    async def _put(self, monitor: Monitor, match: Doc, **change: Any) -> Monitor | None:
        """A compare-and-set by ``update_one`` (every check makes one: SecantusDB runs it
        about ten times faster than ``find_one_and_update``); the monitor as it is now,
        or None when the stored one did not match."""
        stored = outside_docs(change)
        done = await retry.retried(  # a retry finds the filter false, or sets the same
            lambda: self._coll.update_one({"_id": monitor.id, **match}, {"$set": stored}),
            "record a check",
        )
        return replace(monitor, **change) if done.matched_count else None

    async def went_down(
        self, monitor: Monitor, since: datetime, reason: Reason, changes: Sequence[datetime]
    ) -> Monitor | None:
        """Down, if nothing changed the state meanwhile (for a heartbeat: no new ping);
        ``changes``: its changes of state, this one noted."""
        match: Doc = {"_id": monitor.id, "state": monitor.state, "paused": False}
        if monitor.kind == "heartbeat":
            match |= {"last_ping_at": monitor.last_ping_at, "watch_from": monitor.watch_from}
        return await self._cas(
            match,
            {"state": "down", "down_since": since, "last_error": reason, "changes": changes},
        )

    async def came_up(
        self, monitor: Monitor, at: datetime, changes: Sequence[datetime]
    ) -> Monitor | None:
        """Up again at ``at``, if it is still down since the same moment."""
        return await self._cas(
            {"_id": monitor.id, "state": "down", "down_since": monitor.down_since},
            {"state": "up", "failures": 0, "failing_since": None, "changes": changes}
            | {"down_since": None, "last_check_at": at, "last_error": None},
        )

    async def told(
        self, monitor: Monitor, word: Word, code: str | None, at: datetime, since: datetime
    ) -> Monitor | None:
        """The owner was told ``word`` at ``at`` (alert ``code`` open for it), if no
        other process told them anything meanwhile."""
        return await self._cas(
            {"_id": monitor.id, "told_at": monitor.told_at},
            {"told": word, "alert_code": code, "told_at": at, "told_since": since},
        )

    async def page_seen(self, monitor: Monitor, seen: PageSeen) -> Monitor | None:
        """A ``change`` monitor's page as seen now (``scheduler.monitors.change``), if no
        other process recorded another meanwhile."""
        change: Doc = {"page_found": seen.found, "change_code": seen.change_code}
        if seen.page_hash is not None:
            change |= {"page_hash": seen.page_hash, "page_text": seen.page_text}
        if seen.changed_at is not None:
            change["changed_at"] = seen.changed_at
        match: Doc = {"_id": monitor.id, "page_hash": monitor.page_hash}
        match["page_found"] = {"$ne": not monitor.page_found}  # absent: found
        return await self._cas(match, change)

    async def pinged(self, monitor_id: str, at: datetime) -> Monitor | None:
        return await self._cas({"_id": monitor_id}, {"last_ping_at": at, "last_check_at": at})

    async def _cas(self, match: Doc, change: Doc) -> Monitor | None:
        doc = await retry.retried(  # a retry finds the filter false, or sets the same
            lambda: self._coll.find_one_and_update(
                match, {"$set": outside_docs(change)}, return_document=ReturnDocument.AFTER
            ),
            "change a monitor",
        )
        return None if doc is None else Monitor.from_doc(doc)
