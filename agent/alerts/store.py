"""Alerts in MongoDB: codes, dedupe, lifecycle changes with history, timers, SMS budget;
and the check of what an alert is raised with.

Every state change is one conditional update, so two replies racing (a button press
and a typed "ack") or two processes ticking cannot apply a change twice. Timers
live in the documents (``next_escalation_at`` + ``next_action``), which is what lets
a restarted process carry on an escalation where the old one stopped.

A write cut off by a dropped connection is sent once more (``storage.retry``) where
that cannot apply it twice: changes and timer claims carry a claim token, inserts
their own ``_id``, the rest are ``$set`` or compare-and-set.

What an alert is raised with is checked once (``validate``), for every way in (tool,
API, internal); the messages name the field and the rule, so an API caller or the
model can fix the request without guessing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage import retry
from storage.ejson import aware
from storage.outside import Outside
from storage.repos import sms_budget
from storage.repos.sms_budget import BUDGET_DOC

Doc = dict[str, Any]
Severity = Literal["info", "warning", "critical"]
Status = Literal["open", "acknowledged", "snoozed", "muted", "resolved"]
Action = Literal["deliver", "sms", "wake", "unmute"]

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
UNRESOLVED: tuple[Status, ...] = ("open", "acknowledged", "snoozed", "muted")
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
HINT_SECONDS = 5.0
"""How long ``latest_sent`` trusts its last look when it found nothing recent: every
owner message asks, and nearly always no alert is in play. A change through this
store forgets the hint at once; one made by another process counts within this."""
LIMITS: Mapping[str, int] = MappingProxyType(
    {"title": 200, "body": 4000, "dedupe_key": 200, "source": 100, "reason": 1000}
)


@dataclass(frozen=True)
class AlertRecord:
    """The fields of an ``alerts`` document the router decides on, typed, read in this
    one place (``from_doc``). The document itself is what tools, the API and the
    dashboard show (``policy.public``)."""

    id: Any
    code: str
    severity: Severity
    status: Status
    next_action: Action | None = None
    next_escalation_at: datetime | None = None
    sms_rounds: int = 0
    """SMS pages sent in the current escalation."""
    count: int = 1
    """Times it was raised (repeats under its dedupe key included)."""
    count_at_mute: int | None = None
    held: bool = False
    """Waiting for the owner's quiet hours to end."""
    last_page: str | None = None
    """How the last page went (``budget``: the hourly SMS budget was used up)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> AlertRecord:
        at_mute = doc.get("count_at_mute")
        return cls(
            id=doc.get("_id"),
            code=str(doc.get("code", "")),
            severity=doc.get("severity") or "info",
            status=doc.get("status") or "open",
            next_action=doc.get("next_action"),
            next_escalation_at=aware(doc.get("next_escalation_at")),
            sms_rounds=int(doc.get("sms_rounds") or 0),
            count=int(doc.get("count") or 1),
            count_at_mute=int(at_mute) if at_mute else None,
            held=bool(doc.get("held")),
            last_page=doc.get("last_page"),
        )


def entry(now: datetime, by: str, action: str, detail: str | None = None) -> Doc:
    """One line of an alert's history: who did what, when."""
    item: Doc = {"at": now, "by": by, "action": action}
    if detail:
        item["detail"] = detail
    return item


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

    async def insert(self, doc: Doc) -> Doc | None:
        """Insert a new alert; None when an unresolved one already holds its dedupe key."""
        try:
            await retry.insert(self._alerts, doc)
        except DuplicateKeyError as exc:
            if "open_key" in str(exc):
                return None
            raise
        finally:
            self._forget()
        return doc

    async def repeat(self, dedupe_key: str, now: datetime) -> Doc | None:
        """Count a repeat on the unresolved alert with this key; None when there is none."""
        try:
            return await retry.claim(
                self._alerts,
                {"open_key": dedupe_key},
                {"$inc": {"count": 1}, "$set": {"last_seen_at": now, "updated_at": now}},
            )
        finally:
            self._forget()

    # -- reading -------------------------------------------------------------------

    async def by_code(self, code: str) -> Doc | None:
        return await self._alerts.find_one({"code": code.lstrip("#").lower()})

    async def unresolved(self, limit: int = 50) -> list[Doc]:
        cursor = self._alerts.find(
            {"status": {"$in": list(UNRESOLVED)}},
            sort=[("created_at", DESCENDING), ("_id", DESCENDING)],
            limit=limit,
        )
        return await cursor.to_list()

    def none_sent_since(self, since: datetime) -> bool:
        """Whether this store knows, without a query, that no unresolved alert has been
        sent to the owner since ``since``: its last look is fresh and nothing changed
        through it since. False when only a query can tell (``latest_sent``)."""
        hint = self._sent_hint
        if hint is None or time.monotonic() - hint[0] >= self._hint_seconds:
            return False
        return hint[1] is None or hint[1] < since

    async def latest_sent(self, since: datetime | None = None) -> Doc | None:
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
        return doc

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

    async def claim_due(self, now: datetime, alert_id: Any = None) -> Doc | None:
        """Take the next due timer (or this alert's) by pushing it ``LEASE`` ahead."""
        query: Doc = {"next_escalation_at": {"$lte": now}}
        if alert_id is not None:
            query["_id"] = alert_id
        return await retry.claim(
            self._alerts,
            query,
            {"$set": {"next_escalation_at": now + LEASE}},
            sort=[("next_escalation_at", ASCENDING)],
        )

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

    async def waiting_warning_pages(self) -> list[Doc]:
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
        return await cursor.to_list()

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

    async def claim_call(self, now: datetime) -> Doc | None:
        """Take the next open alert whose call is due by pushing ``call_at`` ``LEASE``
        ahead; a process that dies before the call is recorded retries it then."""
        return await retry.claim(
            self._alerts,
            {"status": "open", "call_at": {"$lte": now}},
            {"$set": {"call_at": now + LEASE}},
            sort=[("call_at", ASCENDING)],
        )

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

    async def note_call_event(self, alert_id: Any, event: str, history: Sequence[Doc] = ()) -> bool:
        """Remember a Twilio webhook event (``<CallSid>:<what>``) on its alert, with
        ``history``; False when it was noted before (a replayed webhook)."""
        try:
            done = await retry.claim(
                self._alerts,
                {"_id": alert_id, "call_events": {"$ne": event}},
                {
                    "$push": {
                        "call_events": {"$each": [event], "$slice": -CALL_EVENTS_KEEP},
                        "history": {"$each": list(history), "$slice": -HISTORY_KEEP},
                    }
                },
            )
        finally:
            self._forget()
        return done is not None

    async def outbox_row(self, key: str) -> Doc | None:
        """The outbox row sent under ``key``: its status and last error."""
        return await self._outbox.find_one({"_id": key}, projection={"status": 1, "last_error": 1})

    # -- changes ---------------------------------------------------------------------

    async def change(
        self,
        alert_id: Any,
        *,
        when_status: Sequence[str] | None = None,
        set_: Doc | None = None,
        unset: Sequence[str] = (),
        inc: Doc | None = None,
        history: Sequence[Doc] = (),
        delivered: Sequence[Doc] = (),
        when_due: datetime | None = None,
    ) -> Doc | None:
        """One atomic change, applied only while the status is one of ``when_status``
        (and the timer is still at ``when_due``, when given)."""
        query: Doc = {"_id": alert_id}
        if when_status is not None:
            query["status"] = {"$in": list(when_status)}
        if when_due is not None:
            query["next_escalation_at"] = when_due
        update: Doc = {}
        if set_:
            update["$set"] = set_
        if unset:
            update["$unset"] = dict.fromkeys(unset, "")
        if inc:
            update["$inc"] = inc
        push: Doc = {}
        if history:
            push["history"] = {"$each": list(history), "$slice": -HISTORY_KEEP}
        if delivered:
            push["deliveries"] = {"$each": list(delivered), "$slice": -DELIVERIES_KEEP}
        if push:
            update["$push"] = push
        try:
            # A claim: its $inc and $push apply once even when the write is sent again.
            return await retry.claim(self._alerts, query, update)
        finally:
            self._forget()

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


class AlertError(ValueError):
    """An alert that cannot be raised as given; the message says which field and why."""


def _text(name: str, value: Any, *, required: bool) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip() and not required):
        if required:
            raise AlertError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise AlertError(f"{name} must be a string, not {type(value).__name__}")
    text: str = value.strip()
    if required and not text:
        raise AlertError(f"{name} must not be empty")
    if len(text) > LIMITS[name]:
        raise AlertError(f"{name} is {len(text)} characters; at most {LIMITS[name]}")
    return text


def own_source(alert: Mapping[str, Any]) -> str:
    """Who raised ``alert`` (``cron:<job id>``, ``pulse``, ``agent``, ``monitor:<name>``)
    when Watchkeeper said it; "" when the source is a caller's words (``POST /api/alerts``
    may say anything, ``cron:<id>`` included): job and pulse replies never reach through
    an alert that only claims to be one."""
    if "source" in (alert.get("outside") or {}):
        return ""
    return str(alert.get("source") or "")


def validate(
    severity: Any, title: Any, body: Any, dedupe_key: Any, source: Any, reason: Any = None
) -> dict[str, Any]:
    """Check raw input (tool, API, internal) once, here, with messages a caller can act on.

    ``title``, ``body`` and ``reason`` may be ``Outside`` (words from outside, with their
    source): they are stored as text, and ``outside`` maps each such field to its source,
    so every later reader (the alert texts, the prompt) knows whose words they are."""
    outside: dict[str, str] = {}
    given = {"title": title, "body": body, "reason": reason, "source": source}
    for name, value in given.items():
        if isinstance(value, Outside):
            outside[name] = value.source[: LIMITS["source"]]
            given[name] = value.text
    if severity not in SEVERITIES:
        shown = repr(severity)
        if len(shown) > 40:  # the message goes back to the caller: never echo a huge value
            shown = shown[:39] + "…"
        raise AlertError(f"severity must be one of info, warning, critical; got {shown}")
    fields: dict[str, Any] = {
        "severity": severity,
        "title": _text("title", given["title"], required=True),
        "body": _text("body", given["body"], required=False) or "",
        "dedupe_key": _text("dedupe_key", dedupe_key, required=False),
        "source": _text("source", given["source"], required=False) or "agent",
    }
    said = _text("reason", given["reason"], required=False)
    if said:
        fields["reason"] = said
    kept = {k: v for k, v in outside.items() if fields.get(k)}
    if kept:
        fields["outside"] = kept
    return fields
