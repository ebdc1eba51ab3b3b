"""Monitors: checks that run without the model (``manage_monitor``, ``/api/monitors``).

Two kinds. ``http``: a GET of ``url`` every ``interval_seconds`` on a new connection;
up when it answers ``expect_status`` (default any 2xx or 3xx) within the timeout and,
with a ``keyword``, its body holds it. ``heartbeat``: something outside pings
``/ping/<token>``; down once ``period_seconds`` plus ``grace_seconds`` pass without a
ping (counted from the last ping stored, or the creation or resume if later), or at
once on ``/ping/<token>/fail``, as Healthchecks.io does.

The state of each monitor lives in its document in ``monitors`` (this module owns the
collection), so a restarted process carries on where the last one stopped:

1. What the owner was told is stored beside the state (``told``, with the code of the
   alert raised): a restart never raises a second alert for a monitor already down,
   and a heartbeat's deadline is counted from the ping stored, not from the start of
   the process.
2. A change of state is stored first, then told (``Hooks``), then stored as told: a
   crash in between tells it at the next review, and telling twice is harmless (the
   alert goes under the dedupe key ``monitor:<id>``, which the router counts rather
   than sends; the way back up is sent under an idempotency key). What is told, and
   when, is damped (``scheduler.monitor_news``): a flapping monitor makes one alert,
   and a monitor makes at most one message per five minutes.
3. Every change of state is a compare-and-set on the stored state, so two processes
   checking the same monitor (``watchkeeper chat`` beside ``watchkeeper run``) make one
   transition; a heartbeat is declared down only if its stored last ping is still the
   one the deadline was counted from.
4. A heartbeat's ping token is stored as its hash only: the token is in the answer to
   ``create`` and nowhere else (not in ``db_query``, a list or the API).
5. At most ``max_monitors``, however many creates run at once: each monitor holds a
   numbered slot below the cap, one per slot by a unique index.

What to do when a monitor goes down or comes back is given as ``Hooks`` (the alert
router's side, in ``agent.app.features.monitors``): this package never imports the agent.
Nothing here calls a model.
Why a check failed is ours, or what the site sent (``HTTP/1.1 2OO <anything>``): an
``Outside``, stored and quoted as the site's words wherever it goes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import aiohttp
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError
from yarl import URL

from scheduler.monitor_news import Damping, Word, flap_text, news, noted, recent
from storage import retry
from storage.outside import Outside, outside_docs
from storage.tasks import stop_task, wait_event

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Clock = Callable[[], datetime]
Kind = Literal["http", "heartbeat"]
State = Literal["new", "up", "down"]
COLLECTION = "monitors"
KINDS: tuple[Kind, ...] = ("http", "heartbeat")
SEVERITIES = ("info", "warning", "critical")
HTTP_FIELDS = ("url", "interval_seconds", "expect_status", "keyword", "failures_before_alert")
HEARTBEAT_FIELDS = ("period_seconds", "grace_seconds")
NAME_LIMIT = 80
URL_LIMIT = 2000
KEYWORD_LIMIT = 200
REASON_LIMIT = 300
MAX_BODY = 1024 * 1024  # bytes of an answer searched for the keyword
MAX_INTERVAL = 86_400
MAX_PERIOD = 31 * 86_400
MAX_GRACE = 7 * 86_400
MAX_FAILURES = 10
SLOT_ATTEMPTS = 20
"""Draws of a free slot before a create gives up (each loses only to a create that won)."""
USER_AGENT = "Watchkeeper-monitor/1"
SITE = "the site"  # whose words a reason from the site's answer are
Reason = str | Outside  # why a check failed: our own words, or the site's


class MonitorError(ValueError):
    """A monitor that cannot be made or changed as asked; the message says why, in
    words the model can relay."""


@dataclass(frozen=True)
class MonitorLimits:
    """The rules for monitors. Tests shorten ``min_interval_seconds`` (and the
    timeout) here, never through the tool or the API."""

    max_monitors: int = 50
    min_interval_seconds: int = 30
    """Smallest ``interval_seconds`` and ``period_seconds``."""
    timeout_seconds: float = 10.0
    """An http check that has no full answer within this is a failure."""
    resync_seconds: float = 60.0
    """How often the documents are read again (changes made by another process)."""
    damping: Damping = field(default_factory=Damping)
    """Flapping and the rate of messages (``scheduler.monitor_news``)."""
    review_seconds: float = 1.0
    """How often news held back (too soon, or flapping) is looked at again."""


@dataclass(frozen=True)
class Monitor:
    """One monitor as stored: its settings and its state."""

    id: str
    name: str
    kind: Kind
    severity: str
    paused: bool
    revision: int
    """Raised by every change of settings: a running watch with an older one restarts."""
    created_at: datetime
    url: str | None = None
    interval_seconds: int | None = None
    expect_status: int | None = None
    keyword: str | None = None
    failures_before_alert: int = 2
    period_seconds: int | None = None
    grace_seconds: int | None = None
    token_key: str | None = None
    """A heartbeat's ping token as stored: its hash only (``token_key``)."""
    token: str | None = None
    """The ping token itself: only on the monitor ``create`` returns, never stored or
    read back, so neither ``db_query`` nor a list shows it (DESIGN.md: secrets)."""
    state: State = "new"
    failures: int = 0
    failing_since: datetime | None = None
    down_since: datetime | None = None
    alert_code: str | None = None
    """The alert open for it (down or flapping), as told."""
    told: Word = "up"
    """What the owner was last told: ``up`` (nothing open), ``down`` or ``flapping``."""
    told_at: datetime | None = None
    """When the last message about it was sent (at most one per ``Damping.quiet``)."""
    told_since: datetime | None = None
    """Since when what was told holds: the down (as told) or the flapping."""
    changes: tuple[datetime, ...] = ()
    """The latest changes of state between up and down, oldest first."""
    last_check_at: datetime | None = None
    last_error: Reason | None = None
    last_ping_at: datetime | None = None
    watch_from: datetime | None = None
    """A heartbeat with no ping yet is late this long after creation or resume."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Monitor:
        names = {item.name for item in fields(cls)} - {"token"}
        given = {k: v for k, v in doc.items() if k in names}
        given["changes"] = tuple(doc.get("changes") or ())
        if "told" not in doc:  # stored before the damping: an open alert was told down
            given["told"] = "down" if doc.get("alert_code") else "up"
            given["told_since"] = doc.get("down_since")
        if isinstance(given.get("last_error"), Mapping):  # the site's words, kept as such
            given["last_error"] = Outside.from_doc(given["last_error"])
        return cls(id=str(doc["_id"]), **given)

    def since(self) -> datetime:
        """What a heartbeat counts from: its last ping, or its creation or resume if later."""
        return max(m for m in (self.last_ping_at, self.watch_from, self.created_at) if m)

    def deadline(self) -> datetime | None:
        """When a heartbeat is late (None for ``http``)."""
        if self.kind != "heartbeat":
            return None
        wait = (self.period_seconds or 0) + (self.grace_seconds or 0)
        return self.since() + timedelta(seconds=wait)


@dataclass(frozen=True)
class Hooks:
    """What happens outside the scheduler when a monitor changes state."""

    down: Callable[[Monitor, Reason], Awaitable[str | None]]
    """Raise the alert for ``monitor``, down for ``reason``; returns its code."""
    up: Callable[[Monitor, timedelta], Awaitable[None]]
    """``monitor`` (as it was while down) is up again after the given time: resolve
    its alert and tell the owner. Must be safe to run twice."""
    cleared: Callable[[Monitor, str], Awaitable[None]]
    """``monitor``'s alert is to close, unsaid (the reason: paused, deleted, flapping,
    settled)."""
    flapping: Callable[[Monitor, str], Awaitable[str | None]]
    """Raise the one alert for ``monitor`` flapping (the text says how); its code."""


@dataclass
class CheckStats:
    """How late http checks started and ended against their due time (for
    ``bench/bench_monitors.py``; a slow target makes ``done_max`` long, not us)."""

    checks: int = 0
    late_max: float = 0.0
    late_over_second: int = 0
    done_max: float = 0.0
    done_over_second: int = 0

    def record(self, late: float, done: float) -> None:
        self.checks += 1
        self.late_max, self.done_max = max(self.late_max, late), max(self.done_max, done)
        self.late_over_second += late > 1.0
        self.done_over_second += done > 1.0


# -- settings: checked once, for the tool and the API ---------------------------------


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MonitorError(f"{name} must be a non-empty text")
    text = value.strip()
    if len(text) > limit:
        raise MonitorError(f"{name} is {len(text)} characters; at most {limit}")
    return text


def _whole(value: Any, name: str, low: int, high: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MonitorError(f"{name} must be a whole number")
    if not low <= value <= high:
        raise MonitorError(f"{name} must be between {low} and {high}{hint}; got {value}")
    return value


def check_url(value: Any) -> str:
    """An http(s) URL with a host; private and home-network hosts are allowed."""
    text = _text(value, "url", URL_LIMIT)
    try:
        url = URL(text)
    except (ValueError, TypeError):
        raise MonitorError(f"url {text[:80]!r} is not a valid URL") from None
    if url.scheme not in ("http", "https"):
        raise MonitorError(f"url must start with http:// or https://; got {text[:80]!r}")
    if not url.host:
        raise MonitorError(f"url {text[:80]!r} has no host name")
    return text


def settle(
    kind: Kind, given: Mapping[str, Any], current: Mapping[str, Any], limits: MonitorLimits
) -> Doc:
    """The settings of a ``kind`` monitor: ``current`` (stored) with ``given`` over it
    (None = unchanged), checked; raises ``MonitorError`` naming the field."""
    given = {k: v for k, v in given.items() if v is not None}
    wrong = [k for k in (HEARTBEAT_FIELDS if kind == "http" else HTTP_FIELDS) if k in given]
    if wrong:
        fits = "a heartbeat" if kind == "http" else "an http monitor"
        raise MonitorError(f"{', '.join(wrong)} only apply to {fits}, not a {kind} monitor")
    merged = {**current, **given}
    out: Doc = {"name": _text(merged.get("name"), "name", NAME_LIMIT)}
    severity = merged.get("severity") or "warning"
    if severity not in SEVERITIES:
        raise MonitorError(
            f"severity must be info, warning or critical; got {str(severity)[:40]!r}"
        )
    out["severity"] = severity
    least = limits.min_interval_seconds
    if kind == "http":
        if merged.get("url") is None:
            raise MonitorError("url is required for an http monitor")
        out["url"] = check_url(merged["url"])
        interval = merged.get("interval_seconds", 60)
        hint = f" (a check at most every {least} s)"
        out["interval_seconds"] = _whole(interval, "interval_seconds", least, MAX_INTERVAL, hint)
        status = merged.get("expect_status")
        if status == 0:  # any 2xx or 3xx again
            status = None
        out["expect_status"] = None if status is None else _whole(status, "expect_status", 100, 599)
        keyword = merged.get("keyword")
        out["keyword"] = None if keyword in (None, "") else _text(keyword, "keyword", KEYWORD_LIMIT)
        failures = merged.get("failures_before_alert", 2)
        out["failures_before_alert"] = _whole(failures, "failures_before_alert", 1, MAX_FAILURES)
        return out
    if merged.get("period_seconds") is None:
        raise MonitorError(
            "period_seconds is required for a heartbeat: how often the job pings, in seconds"
        )
    period = _whole(merged["period_seconds"], "period_seconds", least, MAX_PERIOD)
    grace = merged.get("grace_seconds")
    if grace is None:  # a tenth of the period, from a minute to an hour
        grace = min(max(period // 10, 60), 3600)
    out["period_seconds"] = period
    out["grace_seconds"] = _whole(grace, "grace_seconds", 0, MAX_GRACE)
    return out


def stored_time(moment: datetime) -> datetime:
    """``moment`` as MongoDB keeps it (milliseconds), so a time held in memory equals
    the one read back (compare-and-set filters compare them)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def token_key(token: str) -> str:
    """What a ping token is looked up by: its hash, so the look-up's timing tells a
    guesser nothing about the token itself."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


# -- storage --------------------------------------------------------------------------


class MonitorStore:
    """The ``monitors`` collection: every read and write of it goes through here."""

    def __init__(self, db: AsyncDatabase[Doc], clock: Clock, limits: MonitorLimits) -> None:
        self._coll = db[COLLECTION]
        self._now = clock
        self.limits = limits

    def _clock(self) -> datetime:
        return stored_time(self._now())

    async def upgrade(self) -> None:
        """Bring monitors stored by earlier versions up to date (repeatable): no
        readable token, a slot each, and what the owner was told."""
        if await self.forget_plain_tokens():
            log.info("monitors: readable ping tokens removed; their hashes are kept")
        await self.fill_slots()
        async for doc in self._coll.find({"told": {"$exists": False}}):
            await self._note_told(Monitor.from_doc(doc))  # an open alert was told down

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
        return [Monitor.from_doc(d) for d in docs]

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

    async def _name_free(self, name: str, own_id: str | None = None) -> None:
        other = await self._coll.find_one({"name_key": name.casefold()}, {"_id": 1})
        if other is not None and other["_id"] != own_id:
            raise MonitorError(f"there is already a monitor named {name!r}; choose another name")

    async def create(self, kind: Any, given: Mapping[str, Any]) -> Monitor:
        if kind not in KINDS:
            got = "" if kind is None else f"; got {str(kind)[:40]!r}"
            raise MonitorError(f"kind is required: http or heartbeat{got}")
        settled = settle(kind, given, {}, self.limits)
        await self._name_free(settled["name"])
        now = self._clock()
        doc: Doc = {
            **settled,
            "name_key": settled["name"].casefold(),
            "kind": kind,
            "paused": False,
            "revision": 1,
            "state": "new",
            "failures": 0,
            "told": "up",
            "created_at": now,
            "watch_from": now,
        }
        token = secrets.token_urlsafe(24) if kind == "heartbeat" else None
        if token is not None:
            doc["token_key"] = token_key(token)
        await self._insert_in_a_slot(doc)
        return replace(Monitor.from_doc(doc), token=token)

    def _full(self) -> MonitorError:
        most = self.limits.max_monitors
        return MonitorError(
            f"there are already {most} monitors, the most allowed; delete one first"
        )

    async def _open_slots(self) -> list[int]:
        """The slot numbers below the cap that no monitor holds."""
        held = await self._coll.find({"slot": {"$exists": True}}, {"slot": 1}).to_list(None)
        taken = {d["slot"] for d in held}
        return [n for n in range(self.limits.max_monitors) if n not in taken]

    async def _free_slots(self) -> list[int]:
        """The open slots; none while as many monitors as the cap exist (slotted or
        not: a store from before the slots may hold a few more)."""
        if await self._coll.count_documents({}) >= self.limits.max_monitors:
            return []
        return await self._open_slots()

    async def _insert_in_a_slot(self, doc: Doc) -> None:
        """Insert ``doc`` holding one of the ``max_monitors`` slots, under a fresh id.

        The cap holds by construction, however many creates run at once: each monitor
        holds a slot number below the cap and a unique index allows one monitor per
        slot, so a create that loses a race for a slot (or an id) draws again among
        those still free, and finds none once the cap is reached."""
        for _ in range(SLOT_ATTEMPTS):
            free = await self._free_slots()
            if not free:
                raise self._full()
            doc |= {"_id": secrets.token_hex(4), "slot": secrets.choice(free)}
            try:
                await retry.insert(self._coll, doc)  # a retry finds its own id stored
            except DuplicateKeyError:
                continue
            return
        raise MonitorError("too many monitors are being made at once; try again")

    async def fill_slots(self) -> None:
        """Give a slot to each monitor an earlier version made without one, while
        slots are free (repeatable; another process doing the same is fine)."""
        unslotted = self._coll.find({"slot": {"$exists": False}}, {"_id": 1})
        for doc in await unslotted.sort("created_at", 1).to_list(None):
            for _ in range(SLOT_ATTEMPTS):
                free = await self._open_slots()
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

    async def update(self, monitor_id: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.find(monitor_id)
        kind = given.get("kind")
        if kind is not None and kind != monitor.kind:
            raise MonitorError(
                f"{monitor.name} is a {monitor.kind} monitor and its kind cannot change; "
                "delete it and create another"
            )
        kept = HTTP_FIELDS if monitor.kind == "http" else HEARTBEAT_FIELDS
        current = {k: getattr(monitor, k) for k in ("name", "severity", *kept)}
        settled = settle(monitor.kind, given, current, self.limits)
        if settled["name"].casefold() != monitor.name.casefold():
            await self._name_free(settled["name"], monitor.id)
        change = {**settled, "name_key": settled["name"].casefold()}
        if monitor.kind == "http" and settled.get("url") != monitor.url:
            change |= {"failures": 0, "failing_since": None}
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
        change: Doc = {"state": "up", "failures": 0, "failing_since": None}
        change |= {"last_check_at": at, "last_error": None}
        return await self._put(monitor, {"state": {"$ne": "down"}}, change)

    async def failed(self, monitor: Monitor, at: datetime, reason: Reason) -> Monitor | None:
        """One more failure in a row; ``failing_since`` is kept from the first."""
        change: Doc = {"failures": monitor.failures + 1, "last_error": reason}
        change |= {"failing_since": monitor.failing_since or at, "last_check_at": at}
        return await self._put(monitor, {"failures": monitor.failures}, change)

    async def _put(self, monitor: Monitor, match: Doc, change: Doc) -> Monitor | None:
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
        self, monitor: Monitor, since: datetime, reason: Reason, at: datetime
    ) -> Monitor | None:
        """Down, if nothing changed the state meanwhile (for a heartbeat: no new ping);
        a change at ``at`` (told later: ``told``)."""
        match: Doc = {"_id": monitor.id, "state": monitor.state, "paused": False}
        if monitor.kind == "heartbeat":
            match |= {"last_ping_at": monitor.last_ping_at, "watch_from": monitor.watch_from}
        changes = noted(monitor.changes, at, self.limits.damping)
        return await self._cas(
            match,
            {"state": "down", "down_since": since, "last_error": reason, "changes": changes},
        )

    async def came_up(self, monitor: Monitor, at: datetime) -> Monitor | None:
        changes = noted(monitor.changes, at, self.limits.damping)
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


# -- the check ------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    ok: bool
    reason: Reason = ""


async def check_http(
    session: aiohttp.ClientSession, monitor: Monitor, limit_seconds: float
) -> Result:
    """One GET of the monitor's URL; never raises (a cancellation aside)."""
    assert monitor.url is not None
    expect = monitor.expect_status
    follow = expect is None or not 300 <= expect < 400
    try:
        async with asyncio.timeout(limit_seconds):
            async with session.get(
                monitor.url, allow_redirects=follow, headers={"User-Agent": USER_AGENT}
            ) as resp:
                status = resp.status
                good = status == expect if expect is not None else 200 <= status < 400
                if not good:
                    wanted = str(expect) if expect is not None else "2xx or 3xx"
                    return Result(False, f"answered HTTP {status}; expected {wanted}")
                if monitor.keyword is None:
                    return Result(True)
                body = bytearray()
                while len(body) < MAX_BODY:
                    chunk = await resp.content.read(MAX_BODY - len(body))
                    if not chunk:
                        break
                    body += chunk
                text = body.decode(resp.charset or "utf-8", errors="replace")
                if monitor.keyword in text:
                    return Result(True)
                return Result(
                    False, f"answered HTTP {status} without the keyword {monitor.keyword!r}"
                )
    except TimeoutError:
        return Result(False, f"no answer within {limit_seconds:g} s")
    except (aiohttp.ClientError, OSError, ValueError, LookupError) as exc:
        detail = (str(exc) or type(exc).__name__)[:REASON_LIMIT]
        unanswered = isinstance(exc, aiohttp.ClientConnectorError)  # no word from the site
        if unanswered and not isinstance(exc, aiohttp.ClientSSLError):
            return Result(False, f"request failed: {detail}")
        return Result(False, Outside(detail, SITE))  # it may quote what the site sent


def down_for_text(span: timedelta) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``, ``1 d 3 h``: how long a monitor was down."""
    seconds = max(0, int(span.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


# -- the service ----------------------------------------------------------------------


@dataclass
class _Watch:
    revision: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Monitors:
    """Runs every monitor that is not paused, one task each (asyncio's timer heap does
    the scheduling), and answers the tool, the API and the pings."""

    def __init__(
        self, store: MonitorStore, hooks: Hooks, clock: Clock, *, watching: bool = True
    ) -> None:
        """``watching``: run the checks here. Only ``watchkeeper run`` does; a
        ``watchkeeper chat`` beside it edits and lists monitors, and ``run`` takes the
        changes up at its next read of the collection."""
        self.store = store
        self.watching = watching
        self.limits = store.limits
        self._hooks = hooks
        self._now = clock
        self._session: aiohttp.ClientSession | None = None
        self._current: dict[str, Monitor] = {}
        self._tokens: dict[str, str] = {}
        """token_key -> monitor id, for the pings."""
        self._watches: dict[str, _Watch] = {}
        self._resync: asyncio.Task[None] | None = None
        self._reviews: asyncio.Task[None] | None = None
        self._reviewing: set[str] = set()
        """Monitors whose news is being told here now (told once, not twice at once)."""
        self._last_miss_reload = float("-inf")
        self.stats = CheckStats()

    def _clock(self) -> datetime:
        return stored_time(self._now())

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> int:
        """Load every monitor and start watching the active ones; returns how many."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=100),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        await self.store.upgrade()
        await self._load(spread=True)
        self._resync = asyncio.create_task(self._resync_loop(), name="monitors-resync")
        if self.watching:
            self._reviews = asyncio.create_task(self._review_loop(), name="monitors-news")
        return len(self._watches)

    async def stop(self) -> None:
        await stop_task(self._reviews)
        await stop_task(self._resync)
        self._resync = self._reviews = None
        watches, self._watches = list(self._watches.values()), {}
        await asyncio.gather(*(stop_task(watch.task) for watch in watches))
        if self._session is not None:
            await self._session.close()
        self._session = None

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.resync_seconds)
            try:
                await self._load(spread=False)
            except Exception:
                log.exception("monitors: reading the monitors again failed")

    async def _load(self, *, spread: bool) -> None:
        monitors = await self.store.all()
        seen = {m.id for m in monitors}
        for gone in set(self._current) - seen:
            self._forget(gone)
            await self._unwatch(gone)
        active = {m.id: i for i, m in enumerate(m for m in monitors if not m.paused)}
        for monitor in monitors:
            known = self._current.get(monitor.id)
            self._remember(monitor)
            watch = self._watches.get(monitor.id)
            if monitor.paused:
                await self._unwatch(monitor.id)
            elif watch is None or watch.revision != monitor.revision:
                share = active[monitor.id] / len(active) if spread else 0.0
                await self._watch(monitor, share * (monitor.interval_seconds or 0))
            elif known != monitor:
                watch.wake.set()  # changed by another process (a ping): a new deadline

    def _remember(self, monitor: Monitor) -> None:
        self._current[monitor.id] = replace(monitor, token=None)  # shown once, at creation
        if monitor.token_key is not None:
            self._tokens[monitor.token_key] = monitor.id

    def _forget(self, monitor_id: str) -> None:
        monitor = self._current.pop(monitor_id, None)
        if monitor is not None and monitor.token_key is not None:
            self._tokens.pop(monitor.token_key, None)

    async def _watch(self, monitor: Monitor, delay: float = 0.0) -> None:
        await self._unwatch(monitor.id)
        if not self.watching:
            return
        watch = self._watches[monitor.id] = _Watch(monitor.revision)
        runs = self._http_loop if monitor.kind == "http" else self._heartbeat_loop
        watch.task = asyncio.create_task(runs(monitor.id, watch.wake, delay), name="monitor")

    async def _unwatch(self, monitor_id: str) -> None:
        watch = self._watches.pop(monitor_id, None)
        if watch is not None:
            await stop_task(watch.task)

    # -- what the tool and the API do --------------------------------------------------

    def all(self) -> list[Monitor]:
        return sorted(self._current.values(), key=lambda m: m.created_at)  # stable

    async def create(self, kind: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.store.create(kind, given)
        self._remember(monitor)
        await self._watch(monitor)
        log.info("monitor %s (%s) created", monitor.name, monitor.kind)
        return monitor

    async def update(self, monitor_id: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.store.update(monitor_id, given)
        self._remember(monitor)
        if not monitor.paused:
            await self._watch(monitor)
        return monitor

    async def pause(self, monitor_id: Any) -> Monitor:
        monitor = await self.store.find(monitor_id)
        if monitor.paused:
            return monitor
        await self._unwatch(monitor.id)
        paused = await self.store.set_paused(monitor, True)
        self._remember(paused)
        if monitor.alert_code is not None:
            await self._hooks.cleared(monitor, "paused")
        return paused

    async def resume(self, monitor_id: Any) -> Monitor:
        monitor = await self.store.find(monitor_id)
        if not monitor.paused:
            return monitor
        resumed = await self.store.set_paused(monitor, False)
        self._remember(resumed)
        await self._watch(resumed)
        return resumed

    async def delete(self, monitor_id: Any) -> Monitor:
        monitor = await self.store.find(monitor_id)
        await self._unwatch(monitor.id)
        await self.store.delete(monitor)
        self._forget(monitor.id)
        if monitor.alert_code is not None:
            await self._hooks.cleared(monitor, "deleted")
        return monitor

    async def ping(self, token: str, *, fail: bool = False) -> bool:
        """A heartbeat's ping; False for a token no monitor has (answered 404).

        Looked up by the token's hash in memory (only the hash is stored), the hashes
        then compared in constant time; an unknown token reads the database at most
        once every few seconds (a monitor made by another process), so a flood of
        guesses costs nothing."""
        key = token_key(token)
        monitor_id = self._tokens.get(key)
        if monitor_id is None:
            loop = asyncio.get_running_loop()
            if loop.time() - self._last_miss_reload < 5.0:
                return False
            self._last_miss_reload = loop.time()
            found = await self.store.by_token_key(key)
            if found is None:
                return False
            self._remember(found)
            monitor_id = found.id
        monitor = self._current.get(monitor_id)
        if monitor is None or not hmac.compare_digest(monitor.token_key or "", key):
            return False
        now = self._clock()
        pinged = await self.store.pinged(monitor.id, now)
        if pinged is None:  # deleted meanwhile
            return False
        self._remember(pinged)
        if not pinged.paused:
            if fail:
                await self._down(pinged, now, "reported a failure (/fail)")
            else:
                await self._ok(pinged, now)
        watch = self._watches.get(monitor.id)
        if watch is not None:
            watch.wake.set()
        return True

    # -- the state machine -------------------------------------------------------------

    async def _ok(self, monitor: Monitor, at: datetime) -> None:
        if monitor.state == "down":
            back = await self.store.came_up(monitor, at)
            if back is not None:
                log.info("monitor %s is up again", monitor.name)
                self._remember(back)
                await self._review(back)
                return
            monitor = await self.store.reload(monitor.id) or monitor
        if monitor.state != "up" or monitor.failures or monitor.kind == "http":
            done = await self.store.checked_ok(monitor, at)
            if done is None:  # down after all (another process): next check goes up
                done = await self.store.reload(monitor.id)
            if done is not None:
                self._remember(done)

    async def _failed(self, monitor: Monitor, at: datetime, reason: Reason) -> None:
        counted = await self.store.failed(monitor, at, reason)
        if counted is None:  # another process counted meanwhile: take its count
            counted = await self.store.reload(monitor.id)
            if counted is None:
                return
        self._remember(counted)
        if counted.state != "down" and counted.failures >= counted.failures_before_alert:
            await self._down(counted, counted.failing_since or at, reason)

    async def _down(self, monitor: Monitor, since: datetime, reason: Reason) -> None:
        if monitor.state == "down":
            return
        down = await self.store.went_down(monitor, since, reason, self._clock())
        if down is None:
            self._remember(await self.store.reload(monitor.id) or monitor)
            return
        log.warning("monitor %s is down: %s", monitor.name, reason)
        self._remember(down)
        await self._review(down)

    # -- what the owner is told (scheduler.monitor_news) --------------------------------

    async def _review(self, monitor: Monitor) -> None:
        """Tell the owner what is new about ``monitor``, if anything may be told now
        (module docstring, point 2); held news waits for ``_review_loop``."""
        now = self._clock()
        damping = self.limits.damping
        args = (monitor.state, monitor.told, monitor.told_at, monitor.changes, now, damping)
        word = None if monitor.paused else news(*args)
        if word is None or monitor.id in self._reviewing:
            return
        self._reviewing.add(monitor.id)
        try:
            code, since = await self._tell(monitor, word, now)
            told = await self.store.told(monitor, word, code, now, since)
        finally:
            self._reviewing.discard(monitor.id)
        self._remember(told or await self.store.reload(monitor.id) or monitor)

    async def _tell(
        self, monitor: Monitor, word: Word, now: datetime
    ) -> tuple[str | None, datetime]:
        """Say ``word`` through the hooks; the code of the alert left open, and since
        when what was said holds."""
        open_code = monitor.alert_code
        if word == "up":  # down for as long as it was; flapping until steady (now)
            back = monitor.changes[-1] if monitor.changes else now
            back = now if monitor.told == "flapping" else back
            since = monitor.told_since or back
            await self._hooks.up(replace(monitor, down_since=since), back - since)
            return None, back
        if open_code is not None:  # down and flapping are two alerts: one closes
            await self._hooks.cleared(monitor, "flapping" if word == "flapping" else "settled")
        if word == "flapping":
            text = flap_text(monitor.changes, now, self.limits.damping)
            seen = recent(monitor.changes, now, self.limits.damping)
            return await self._hooks.flapping(monitor, text), seen[0] if seen else now
        reason = monitor.last_error or "down"
        return await self._hooks.down(monitor, reason), monitor.down_since or now

    async def _review_loop(self) -> None:
        """Look at each monitor's held news again (too soon after the last message, or
        flapping until it settles): the real time between looks, the product's clock
        for what is due."""
        while True:
            await asyncio.sleep(self.limits.review_seconds)
            for monitor in list(self._current.values()):
                try:
                    await self._review(monitor)
                except Exception:
                    log.exception("monitor %s: telling the owner failed", monitor.name)

    # -- the loops ---------------------------------------------------------------------

    async def _http_loop(self, monitor_id: str, wake: asyncio.Event, delay: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        while True:
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            late = max(0.0, loop.time() - due)
            monitor = self._current.get(monitor_id)
            if monitor is None or self._session is None:
                return
            try:
                result = await check_http(self._session, monitor, self.limits.timeout_seconds)
                at = self._clock()
                if result.ok:
                    await self._ok(monitor, at)
                else:
                    await self._failed(monitor, at, result.reason)
            except Exception:  # the database away: the next check tries again
                log.exception("monitor %s: recording a check failed", monitor.name)
            self.stats.record(late, loop.time() - due)
            due += monitor.interval_seconds or 60
            due = max(due, loop.time())  # a check that overran starts the next at once

    async def _heartbeat_loop(self, monitor_id: str, wake: asyncio.Event, _: float) -> None:
        while True:
            monitor = self._current.get(monitor_id)
            if monitor is None:
                return
            deadline = monitor.deadline()
            if monitor.state == "down" or deadline is None:
                await wake.wait()
                wake.clear()
                continue
            left = (deadline - self._clock()).total_seconds()
            if left > 0:  # looked at again each second: the wall clock may jump (suspend)
                await wait_event(wake, min(left, 1.0))
                wake.clear()
                continue
            try:
                stored = await self.store.reload(monitor_id)  # a ping another process had
                if stored is None:
                    return
                self._remember(stored)
                if stored.deadline() == deadline and stored.state != "down":
                    await self._down(stored, deadline, _silence(stored, self._clock()))
            except Exception:
                log.exception("monitor %s: recording a missed ping failed", monitor.name)
            known = self._current.get(monitor_id)
            if known is not None and known.state != "down" and known.deadline() == deadline:
                await wait_event(wake, 1.0)  # not recorded down: no tight loop meanwhile
                wake.clear()


def _silence(monitor: Monitor, now: datetime) -> str:
    period = down_for_text(timedelta(seconds=monitor.period_seconds or 0))
    return f"no ping for {down_for_text(now - monitor.since())} (expected every {period})"
