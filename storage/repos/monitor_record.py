"""A monitor as stored: its record, read once (``Monitor.from_doc``), its settings as
checked (``MonitorSettings``), and how its times and ping token are kept.

Why a check failed is ours, or what the site sent (``HTTP/1.1 2OO <anything>``): an
``Outside`` (``Reason``), stored and quoted as the site's words wherever it goes.
The rules for monitors (limits, checking the settings) are the scheduler's
(``scheduler.monitors.monitor``); the collection is ``storage.repos.monitors``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal

from storage.outside import Outside
from storage.records import BadRecord, moment, text, whole

Kind = Literal["http", "heartbeat", "change"]
State = Literal["new", "up", "down"]
Word = Literal["up", "down", "flapping"]
"""What the owner was (or is to be) told: up (nothing open), down, flapping."""
KINDS: tuple[Kind, ...] = ("http", "heartbeat", "change")
HTTP_FIELDS = ("url", "interval_seconds", "expect_status", "keyword", "failures_before_alert")
HEARTBEAT_FIELDS = ("period_seconds", "grace_seconds")
CHANGE_FIELDS = ("url", "interval_seconds", "keyword", "selector", "failures_before_alert")
FIELDS: Mapping[Kind, tuple[str, ...]] = MappingProxyType(
    {"http": HTTP_FIELDS, "heartbeat": HEARTBEAT_FIELDS, "change": CHANGE_FIELDS}
)
"""The settings each kind takes beside ``name`` and ``severity``."""
Reason = str | Outside  # why a check failed: our own words, or the site's


_WHOLE = (
    "revision", "interval_seconds", "expect_status", "failures_before_alert",
    "period_seconds", "grace_seconds", "failures",
)  # fmt: skip
_MOMENTS = (
    "created_at", "failing_since", "down_since", "told_at", "told_since", "last_check_at",
    "last_ping_at", "watch_from", "changed_at",
)  # fmt: skip


class MonitorError(ValueError):
    """A monitor that cannot be made or changed as asked; the message says why, in
    words the model can relay."""


@dataclass(frozen=True)
class MonitorSettings:
    """A monitor's settings as checked (``scheduler.monitors.monitor.settle``): only
    those of its kind are stored."""

    name: str
    severity: str
    url: str | None = None
    interval_seconds: int | None = None
    expect_status: int | None = None
    keyword: str | None = None
    failures_before_alert: int | None = None
    selector: str | None = None
    period_seconds: int | None = None
    grace_seconds: int | None = None

    @classmethod
    def of(cls, monitor: Monitor) -> MonitorSettings:
        """The settings ``monitor`` has now (those of its kind)."""
        kept = {name: getattr(monitor, name) for name in FIELDS[monitor.kind]}
        return cls(name=monitor.name, severity=monitor.severity, **kept)

    def stored(self, kind: Kind) -> dict[str, Any]:
        """The fields a ``kind`` monitor stores, by name."""
        return {name: getattr(self, name) for name in ("name", "severity", *FIELDS[kind])}


@dataclass(frozen=True, slots=True)
class PageSeen:
    """What a ``change`` monitor's check saw, as ``MonitorRepo.page_seen`` records it."""

    found: bool
    """Whether the watched part was on the page."""
    change_code: str | None
    """The code of the message telling of it; None: nothing was told."""
    page_hash: str | None = None
    """The part's digest; None when it was not found (the last one seen is kept)."""
    page_text: Outside | None = None
    changed_at: datetime | None = None
    """When it changed; None: not a change (the first look, or found again)."""


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
    selector: str | None = None
    """``change``: the part of the page compared (``scheduler.monitors.select``)."""
    page_hash: str | None = None
    """``change``: the hash of the text last seen; None until the first good check."""
    page_text: Outside | None = None
    """``change``: the text last seen (the page's words), its first ``PAGE_KEPT``
    characters."""
    page_found: bool = True
    """``change``: False while the selector or keyword finds nothing (told once)."""
    changed_at: datetime | None = None
    change_code: str | None = None
    """``change``: the alert last raised about the page (a change, or its part gone)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Monitor:
        """The stored monitor; a field of the wrong type is a ``BadRecord`` (the store
        logs and skips it: one damaged monitor does not stop the others)."""
        names = {item.name for item in fields(cls)} - {"token"}
        given = {k: v for k, v in doc.items() if k in names}
        if doc.get("kind") not in KINDS:
            raise BadRecord(f"kind is {doc.get('kind')!r}, not one of {', '.join(KINDS)}")
        if doc.get("state", "new") not in ("new", "up", "down"):
            raise BadRecord(f"state is {doc.get('state')!r}")
        given["name"] = text(doc, "name")
        for name in _WHOLE:
            if doc.get(name) is not None:
                given[name] = whole(doc, name)
        for name in _MOMENTS:
            if name in given:
                given[name] = moment(doc, name)
        if moment(doc, "created_at") is None:
            raise BadRecord("created_at is missing")
        changes = doc.get("changes") or ()
        if not isinstance(changes, list | tuple):
            raise BadRecord("changes is not a list")
        # Only counted (flapping): an entry that is not a date is left out.
        given["changes"] = tuple(
            moment({"at": at}, "at") for at in changes if isinstance(at, datetime)
        )
        if "told" not in doc:  # stored before the damping: an open alert was told down
            given["told"] = "down" if doc.get("alert_code") else "up"
            given["told_since"] = doc.get("down_since")
        if isinstance(given.get("last_error"), Mapping):  # the site's words, kept as such
            given["last_error"] = Outside.from_doc(given["last_error"])
        if given.get("page_text") is not None:
            given["page_text"] = Outside.from_doc(given["page_text"])
        if "page_found" in given:
            given["page_found"] = given["page_found"] is not False
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


def stored_time(moment: datetime) -> datetime:
    """``moment`` as MongoDB keeps it (milliseconds), so a time held in memory equals
    the one read back (compare-and-set filters compare them)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def token_key(token: str) -> str:
    """What a ping token is looked up by: its hash, so the look-up's timing tells a
    guesser nothing about the token itself."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
