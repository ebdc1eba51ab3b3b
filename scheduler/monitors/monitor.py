"""A monitor as a value: its settings (checked once, for the tool and the API), its
stored state, and the limits every monitor keeps.

Why a check failed is ours, or what the site sent (``HTTP/1.1 2OO <anything>``): an
``Outside`` (``Reason``), stored and quoted as the site's words wherever it goes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal

from yarl import URL

from scheduler.monitors.news import Damping, Word
from scheduler.monitors.select import SelectorError, parse_selector
from storage.outside import Outside
from storage.records import BadRecord, Doc, moment, text, whole

Kind = Literal["http", "heartbeat", "change"]
State = Literal["new", "up", "down"]
COLLECTION = "monitors"
KINDS: tuple[Kind, ...] = ("http", "heartbeat", "change")
SEVERITIES = ("info", "warning", "critical")
HTTP_FIELDS = ("url", "interval_seconds", "expect_status", "keyword", "failures_before_alert")
HEARTBEAT_FIELDS = ("period_seconds", "grace_seconds")
CHANGE_FIELDS = ("url", "interval_seconds", "keyword", "selector", "failures_before_alert")
FIELDS: Mapping[Kind, tuple[str, ...]] = MappingProxyType(
    {"http": HTTP_FIELDS, "heartbeat": HEARTBEAT_FIELDS, "change": CHANGE_FIELDS}
)
"""The settings each kind takes beside ``name`` and ``severity``."""
KIND_NAMES: Mapping[Kind, str] = MappingProxyType(
    {"http": "an http monitor", "heartbeat": "a heartbeat", "change": "a change monitor"}
)
NAME_LIMIT = 80
URL_LIMIT = 2000
KEYWORD_LIMIT = 200
REASON_LIMIT = 300
MAX_BODY = 1024 * 1024  # bytes of an answer searched for the keyword
PAGE_BYTES = 2 * 1024 * 1024  # bytes of a page a change monitor reads
PAGE_KEPT = 10_000  # characters of a change monitor's text kept, to say what changed
MAX_INTERVAL = 86_400
MAX_PERIOD = 31 * 86_400
MAX_GRACE = 7 * 86_400
MAX_FAILURES = 10
SLOT_ATTEMPTS = 20
"""Draws of a free slot before a create gives up (each loses only to a create that won)."""
USER_AGENT = "Watchkeeper-monitor/1"
SITE = "the site"  # whose words a reason from the site's answer are
Reason = str | Outside  # why a check failed: our own words, or the site's


_WHOLE = (
    "revision", "interval_seconds", "expect_status", "failures_before_alert",
    "period_seconds", "grace_seconds", "failures",
)  # fmt: skip
_MOMENTS = (
    "created_at", "failing_since", "down_since", "told_at", "told_since", "last_check_at",
    "last_ping_at", "watch_from", "changed_at",
)  # fmt: skip


_KIND_FIELDS = tuple(dict.fromkeys((*HTTP_FIELDS, *HEARTBEAT_FIELDS, *CHANGE_FIELDS)))


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
    min_change_interval_seconds: int = 300
    """Smallest ``interval_seconds`` of a ``change`` monitor: a page is not fetched
    more often than every five minutes."""
    timeout_seconds: float = 10.0
    """An http check that has no full answer within this is a failure."""
    resync_seconds: float = 60.0
    """How often the documents are read again (changes made by another process)."""
    damping: Damping = field(default_factory=Damping)
    """Flapping and the rate of messages (``scheduler.monitors.news``)."""
    review_seconds: float = 1.0
    """How often news held back (too soon, or flapping) is looked at again."""


@dataclass(frozen=True, slots=True)
class PageSeen:
    """What a ``change`` monitor's check saw, as ``MonitorStore.page_seen`` records it."""

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
    wrong = [k for k in _KIND_FIELDS if k in given and k not in FIELDS[kind]]
    if wrong:
        fits = " or ".join(KIND_NAMES[k] for k in KINDS if wrong[0] in FIELDS[k])
        raise MonitorError(f"{', '.join(wrong)} only apply to {fits}, not a {kind} monitor")
    merged = {**current, **given}
    out: Doc = {"name": _text(merged.get("name"), "name", NAME_LIMIT)}
    severity = merged.get("severity") or ("info" if kind == "change" else "warning")
    if severity not in SEVERITIES:
        raise MonitorError(
            f"severity must be info, warning or critical; got {str(severity)[:40]!r}"
        )
    out["severity"] = severity
    least = limits.min_interval_seconds
    if kind in ("http", "change"):
        if merged.get("url") is None:
            raise MonitorError(f"url is required for {KIND_NAMES[kind]}")
        out["url"] = check_url(merged["url"])
        if kind == "change":
            least = max(least, limits.min_change_interval_seconds)
        interval = merged.get("interval_seconds", 60 if kind == "http" else 900)
        if kind == "change" and isinstance(interval, int) and 0 < interval < least:
            raise MonitorError(
                f"interval_seconds is {interval}; a change monitor fetches its page at most "
                f"every {least} s ({least // 60} min), so give {least} or more"
            )
        hint = f" (a check at most every {least} s)"
        out["interval_seconds"] = _whole(interval, "interval_seconds", least, MAX_INTERVAL, hint)
        keyword = merged.get("keyword")
        out["keyword"] = None if keyword in (None, "") else _text(keyword, "keyword", KEYWORD_LIMIT)
        failures = merged.get("failures_before_alert", 2)
        out["failures_before_alert"] = _whole(failures, "failures_before_alert", 1, MAX_FAILURES)
        if kind == "change":
            selector = merged.get("selector")
            out["selector"] = None if selector in (None, "") else _selector(selector)
            return out
        status = merged.get("expect_status")
        if status == 0:  # any 2xx or 3xx again
            status = None
        out["expect_status"] = None if status is None else _whole(status, "expect_status", 100, 599)
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


def _selector(value: Any) -> str:
    if not isinstance(value, str):
        raise MonitorError("selector must be a text, such as '.price' or '#total'")
    try:
        return parse_selector(value).text
    except SelectorError as exc:
        raise MonitorError(str(exc)) from None


def stored_time(moment: datetime) -> datetime:
    """``moment`` as MongoDB keeps it (milliseconds), so a time held in memory equals
    the one read back (compare-and-set filters compare them)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def token_key(token: str) -> str:
    """What a ping token is looked up by: its hash, so the look-up's timing tells a
    guesser nothing about the token itself."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
