"""Alerts in MongoDB: codes, dedupe, lifecycle changes with history, timers, SMS budget.

Every alert is read here, once, into an ``Alert`` (``storage.repos.alert_record``); a
document that cannot be read as one is logged and skipped, so one damaged alert never
stops a list, a page or the escalation loop (a claimed timer of one stays leased: it
is looked at again a ``LEASE`` later, and logged again, never lost).

Every state change is one conditional update, so two replies racing (a button press
and a typed "ack") or two processes ticking cannot apply a change twice. Timers
live in the documents (``next_escalation_at`` + ``next_action``), which is what lets
a restarted process carry on an escalation where the old one stopped.

A write cut off by a dropped connection is sent once more (``storage.retry``) where
that cannot apply it twice: changes and timer claims carry a claim token, inserts
their own ``_id``, the rest are ``$set`` or compare-and-set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage import retry
from storage.repos import sms_budget
from storage.repos.alert_record import (
    UNRESOLVED,
    Alert,
    AlertChanges,
    AlertRecordError,
    Counter,
    Delivery,
    Removable,
    Step,
)
from storage.repos.sms_budget import BUDGET_DOC

log = logging.getLogger(__name__)
Doc = dict[str, Any]
CODE_COUNTER = "alert_code"
CODE_ATTEMPTS = 5
"""Tries at taking the next code while concurrent first alerts create its counter."""
LEASE = timedelta(minutes=2)
"""A claimed timer is pushed this far ahead; a process that dies mid-step is retried then."""
HISTORY_KEEP = 100
DELIVERIES_KEEP = 30
CALL_EVENTS_KEEP = 50
"""Twilio webhook events (key presses, call statuses) remembered per alert, to apply each once."""
CALL_WINDOW = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BULK_PREFIX = "alert_bulk:"
"""``settings`` documents of bulk questions waiting for a confirmation, one per chat."""
HINT_SECONDS = 5.0
"""How long ``latest_sent`` trusts its last look when it found nothing recent: every
owner message asks, and nearly always no alert is in play. A change through this
store forgets the hint at once; one made by another process counts within this."""


@dataclass(frozen=True)
class OutboxRow:
    """How an outbox message sent for an alert went: its status and last error."""

    status: str | None
    last_error: str | None = None


def read(doc: Mapping[str, Any] | None) -> Alert | None:
    """``doc`` as an ``Alert``; None (logged) when there is none or it cannot be read."""
    if doc is None:
        return None
    try:
        return Alert.from_doc(doc)
    except AlertRecordError as exc:
        log.error("skipped a damaged alert: %s", exc)
        return None


def read_all(docs: Sequence[Mapping[str, Any]]) -> list[Alert]:
    """Each of ``docs`` that reads as an alert, in order; the others logged and skipped."""
    return [alert for doc in docs if (alert := read(doc)) is not None]


class AlertStore:
    def __init__(self, db: AsyncDatabase[Doc], hint_seconds: float = HINT_SECONDS) -> None:
        self._alerts = db[c.ALERTS]
        self._settings = db[c.SETTINGS]
        self._outbox = db[c.OUTBOX]
        self._hint_seconds = hint_seconds
        self._sent_hint: tuple[float, datetime | None] | None = None
        """(monotonic time of the look, ``last_sent_at`` of the unresolved alert sent
        last, None for none) for ``latest_sent``."""
        self._changes = 0
        """Counts changes made through this store: a look that overlapped one is not kept."""

    def _forget(self) -> None:
        """After every write through this store: the next ``latest_sent`` looks again."""
        self._changes += 1
        self._sent_hint = None

    # -- creation and dedupe -------------------------------------------------------

    async def next_code(self) -> str:
        """Short, increasing codes (``#12``): easy to type on a phone."""
        # A retry may skip a number (the first try's $inc landed), never repeat one:
        # codes must be unique, not contiguous.
        for _ in range(CODE_ATTEMPTS):
            try:
                doc = await retry.retried(
                    lambda: self._settings.find_one_and_update(
                        {"_id": CODE_COUNTER},
                        {"$inc": {"value": 1}},
                        upsert=True,
                        return_document=ReturnDocument.AFTER,
                    ),
                    "next alert code",
                )
            except DuplicateKeyError:  # another upsert created the counter first
                continue
            # Racing upserts of a missing counter: the loser may get no document (the
            # embedded server) instead of the incremented one. It exists now: ask again.
            if doc is not None:
                return str(doc["value"])
        raise RuntimeError("the alert code counter could not be incremented")

    async def insert(self, alert: Alert) -> Alert | None:
        """Store a new alert (its id given here); None when an unresolved one already
        holds its dedupe key."""
        if alert.id is None:
            alert = replace(alert, id=ObjectId())
        try:
            await retry.insert(self._alerts, alert.to_doc())
        except DuplicateKeyError as exc:
            if "open_key" in str(exc):
                return None
            raise
        finally:
            self._forget()
        return alert

    async def repeat(self, dedupe_key: str, now: datetime) -> Alert | None:
        """Count a repeat on the unresolved alert with this key; None when there is none."""
        try:
            return read(
                await retry.claim(
                    self._alerts,
                    {"open_key": dedupe_key},
                    {"$inc": {"count": 1}, "$set": {"last_seen_at": now, "updated_at": now}},
                )
            )
        finally:
            self._forget()

    # -- reading -------------------------------------------------------------------

    async def by_code(self, code: str) -> Alert | None:
        return read(await self._alerts.find_one({"code": code.lstrip("#").lower()}))

    async def by_open_key(self, dedupe_key: str) -> Alert | None:
        """The unresolved alert raised under ``dedupe_key``, if any."""
        return read(await self._alerts.find_one({"open_key": dedupe_key}))

    async def unresolved(self, limit: int = 50) -> list[Alert]:
        """Unresolved alerts, newest first."""
        cursor = self._alerts.find(
            {"status": {"$in": list(UNRESOLVED)}},
            sort=[("created_at", DESCENDING), ("_id", DESCENDING)],
            limit=limit,
        )
        return read_all(await cursor.to_list())

    async def waiting(self, severity: str, limit: int) -> tuple[int, list[Alert]]:
        """Alerts of ``severity`` nobody has acknowledged yet (status ``open``): how many,
        and the newest ``limit`` of them, newest first. A test page is not among them: it
        is no real alert, and the owner knows it runs."""
        query = {"status": "open", "severity": severity, "test": {"$ne": True}}
        count = await self._alerts.count_documents(query)
        cursor = self._alerts.find(
            query, sort=[("created_at", DESCENDING), ("_id", DESCENDING)], limit=limit
        )
        return count, read_all(await cursor.to_list())

    async def latest(self, limit: int) -> list[Alert]:
        """The latest ``limit`` alerts, open and closed, newest first."""
        cursor = self._alerts.find(
            {}, sort=[("created_at", DESCENDING), ("_id", DESCENDING)], limit=limit
        )
        return read_all(await cursor.to_list())

    def none_sent_since(self, since: datetime) -> bool:
        """Whether this store knows, without a query, that no unresolved alert has been
        sent to the owner since ``since``: its last look is fresh and nothing changed
        through it since. False when only a query can tell (``latest_sent``)."""
        hint = self._sent_hint
        if hint is None or time.monotonic() - hint[0] >= self._hint_seconds:
            return False
        return hint[1] is None or hint[1] < since

    async def latest_sent(self, since: datetime | None = None) -> Alert | None:
        """The unresolved alert most recently sent to the owner (optionally since a time)."""
        hint = self._sent_hint
        if hint is not None and time.monotonic() - hint[0] < self._hint_seconds:
            latest = hint[1]
            if latest is None or (since is not None and latest < since):
                return None  # nothing sent (recently enough): no query
        # The newest sent one, whatever ``since``: its time is the hint for the next ask.
        query: Doc = {"status": {"$in": list(UNRESOLVED)}, "last_sent_at": {"$ne": None}}
        changes, looked = self._changes, time.monotonic()
        doc = await self._alerts.find_one(
            query, sort=[("last_sent_at", DESCENDING), ("_id", DESCENDING)]
        )
        if changes == self._changes:
            self._sent_hint = (looked, doc["last_sent_at"] if doc is not None else None)
        if doc is not None and since is not None and doc["last_sent_at"] < since:
            return None
        return read(doc)

    async def outbox_status(self, key: str) -> str | None:
        doc = await self._outbox.find_one({"_id": key}, projection={"status": 1})
        return str(doc["status"]) if doc else None

    async def supersede(self, keys: Sequence[str], channel: str) -> None:
        """Stop retrying copies that failed once another channel delivered the alert."""
        if keys:
            await retry.retried(  # a $set: safe to repeat
                lambda: self._outbox.update_many(
                    {"_id": {"$in": list(keys)}, "status": "pending"},
                    {"$set": {"status": "superseded", "superseded_by": channel}},
                ),
                "supersede alert copies",
            )

    # -- timers ----------------------------------------------------------------------

    async def claim_due(self, now: datetime, alert_id: Any = None) -> Alert | None:
        """Take the next due timer (or this alert's) by pushing it ``LEASE`` ahead. A
        damaged alert's timer is taken too (it is not due again for a ``LEASE``) and
        skipped: the next due one is returned."""
        query: Doc = {"next_escalation_at": {"$lte": now}}
        if alert_id is not None:
            query["_id"] = alert_id
        while True:
            doc = await retry.claim(
                self._alerts,
                query,
                {"$set": {"next_escalation_at": now + LEASE}},
                sort=[("next_escalation_at", ASCENDING)],
            )
            if doc is None:
                return None
            if (alert := read(doc)) is not None:
                return alert

    async def release_held(self, now: datetime) -> int:
        """Alerts held for quiet hours are due now (the quiet hours changed)."""
        try:
            result = await retry.retried(  # a $set to a fixed time: safe to repeat
                lambda: self._alerts.update_many(
                    {"held": True, "status": "open", "next_escalation_at": {"$gt": now}},
                    {"$set": {"next_escalation_at": now}},
                ),
                "release held alerts",
            )
        finally:
            self._forget()
        return result.modified_count

    async def waiting_warning_pages(self) -> list[Alert]:
        """Open warnings whose timer waits to page them by SMS (not held for quiet hours)."""
        cursor = self._alerts.find(
            {
                "severity": "warning",
                "status": "open",
                "next_action": "sms",
                "sms_rounds": 0,
                "held": {"$ne": True},
                "next_escalation_at": {"$ne": None},
            }
        )
        return read_all(await cursor.to_list())

    async def next_due(self) -> datetime | None:
        doc = await self._alerts.find_one(
            {"next_escalation_at": {"$ne": None}},
            sort=[("next_escalation_at", ASCENDING)],
            projection={"next_escalation_at": 1},
        )
        call = await self._alerts.find_one(  # a range: served by the call_at index
            {"status": "open", "call_at": {"$gte": EPOCH}},
            sort=[("call_at", ASCENDING)],
            projection={"call_at": 1},
        )
        times = [d[f] for d, f in ((doc, "next_escalation_at"), (call, "call_at")) if d]
        return min(times) if times else None

    # -- phone calls -----------------------------------------------------------------

    async def claim_call(self, now: datetime) -> Alert | None:
        """Take the next open alert whose call is due by pushing ``call_at`` ``LEASE``
        ahead; a process that dies before the call is recorded retries it then. A
        damaged alert is skipped as in ``claim_due``."""
        while True:
            doc = await retry.claim(
                self._alerts,
                {"status": "open", "call_at": {"$lte": now}},
                {"$set": {"call_at": now + LEASE}},
                sort=[("call_at", ASCENDING)],
            )
            if doc is None:
                return None
            if (alert := read(doc)) is not None:
                return alert

    async def take_call(self, phone: str, now: datetime, per_hour: int) -> bool:
        """Reserve one call to ``phone`` in a sliding hour: one conditional ``$push``,
        like the SMS budget, so two processes never ring past ``per_hour``."""
        key = f"call_budget:{phone}"
        await retry.retried(  # $pull and $setOnInsert: safe to repeat
            lambda: self._settings.update_one(
                {"_id": key}, {"$pull": {"rang": {"$lte": now - CALL_WINDOW}}}
            ),
            "prune the call budget",
        )
        await retry.retried(
            lambda: self._settings.update_one(
                {"_id": key}, {"$setOnInsert": {"rang": []}}, upsert=True
            ),
            "create the call budget",
        )
        taken = await self._settings.update_one(
            {"_id": key, f"rang.{per_hour - 1}": {"$exists": False}}, {"$push": {"rang": now}}
        )
        return taken.modified_count == 1

    async def note_call_event(
        self, alert_id: Any, event: str, history: Sequence[Step] = ()
    ) -> bool:
        """Remember a Twilio webhook event (``<CallSid>:<what>``) on its alert, with
        ``history``; False when it was noted before (a replayed webhook)."""
        try:
            done = await retry.claim(
                self._alerts,
                {"_id": alert_id, "call_events": {"$ne": event}},
                {
                    "$push": {
                        "call_events": {"$each": [event], "$slice": -CALL_EVENTS_KEEP},
                        "history": {
                            "$each": [step.to_doc() for step in history],
                            "$slice": -HISTORY_KEEP,
                        },
                    }
                },
            )
        finally:
            self._forget()
        return done is not None

    async def outbox_row(self, key: str) -> OutboxRow:
        """How the outbox message sent under ``key`` went (no status: there is none)."""
        doc = await self._outbox.find_one({"_id": key}, projection={"status": 1, "last_error": 1})
        if doc is None:
            return OutboxRow(None)
        error = doc.get("last_error")
        return OutboxRow(doc.get("status"), None if error is None else str(error))

    # -- changes ---------------------------------------------------------------------

    async def change(
        self,
        alert_id: Any,
        *,
        when_status: Sequence[str] | None = None,
        set_: AlertChanges | None = None,
        unset: Sequence[Removable] = (),
        inc: Mapping[Counter, int] | None = None,
        history: Sequence[Step] = (),
        delivered: Sequence[Delivery] = (),
        when_due: datetime | None = None,
    ) -> Alert | None:
        """One atomic change, applied only while the status is one of ``when_status``
        (and the timer is still at ``when_due``, when given)."""
        query: Doc = {"_id": alert_id}
        if when_status is not None:
            query["status"] = {"$in": list(when_status)}
        if when_due is not None:
            query["next_escalation_at"] = when_due
        update: Doc = {}
        if set_:
            update["$set"] = dict(set_)
        if unset:
            update["$unset"] = dict.fromkeys(unset, "")
        if inc:
            update["$inc"] = dict(inc)
        push: Doc = {}
        if history:
            push["history"] = {"$each": [h.to_doc() for h in history], "$slice": -HISTORY_KEEP}
        if delivered:
            deliveries = [d.to_doc() for d in delivered]
            push["deliveries"] = {"$each": deliveries, "$slice": -DELIVERIES_KEEP}
        if push:
            update["$push"] = push
        try:
            # A claim: its $inc and $push apply once even when the write is sent again.
            return read(await retry.claim(self._alerts, query, update))
        finally:
            self._forget()

    # -- every open alert at once ("12aa", "12cc") --------------------------------------

    async def take_bulk(self, chat: str, action: str, now: datetime) -> list[str] | None:
        """The codes a bulk ``action`` asked about in ``chat`` and not expired, taken (a
        second confirmation finds nothing); None when none waits."""
        pending = await self._settings.find_one_and_delete(
            {"_id": f"{BULK_PREFIX}{chat}", "action": action, "expires_at": {"$gt": now}}
        )
        if pending is None:
            return None
        return [str(code) for code in pending.get("codes") or ()]

    async def ask_bulk(self, chat: str, action: str, codes: Sequence[str], until: datetime) -> None:
        """Remember that ``chat`` was asked to confirm ``action`` on ``codes`` until ``until``."""
        await self._settings.replace_one(
            {"_id": f"{BULK_PREFIX}{chat}"},
            {"action": action, "codes": list(codes), "expires_at": until},
            upsert=True,
        )

    # -- SMS budget -------------------------------------------------------------------

    async def take_sms(self, now: datetime, per_hour: int) -> bool:
        """Reserve one SMS of the one hourly budget every SMS shares."""
        return await sms_budget.take_sms(self._settings.database, now, per_hour)

    async def budget_frees_at(self) -> datetime | None:
        return await sms_budget.frees_at(self._settings.database)

    async def claim_budget_notice(self, now: datetime) -> bool:
        """True at most once an hour: the owner hears about the budget once, not per alert."""
        # Matching told_at == now too makes a repeat of this write (a retry after a lost
        # reply) still say True; the notice's outbox key (by time) keeps it single.
        result = await retry.retried(
            lambda: self._settings.update_one(
                {
                    "_id": BUDGET_DOC,
                    "$or": [
                        {"told_at": {"$exists": False}},
                        {"told_at": {"$lte": now - timedelta(hours=1)}},
                        {"told_at": now},
                    ],
                },
                {"$set": {"told_at": now}},
            ),
            "claim the budget notice",
        )
        return result.matched_count == 1
