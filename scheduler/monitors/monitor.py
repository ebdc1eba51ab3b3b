"""The rules every monitor keeps: its limits, and its settings checked once, for the
tool and the API (``settle``). The monitor as stored is ``storage.repos.monitor_record``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any

from yarl import URL

from scheduler.monitors.news import Damping
from scheduler.monitors.select import SelectorError, parse_selector
from storage.repos.monitor_record import (
    CHANGE_FIELDS,
    FIELDS,
    HEARTBEAT_FIELDS,
    HTTP_FIELDS,
    KINDS,
    Kind,
    MonitorError,
    MonitorSettings,
)

SEVERITIES = ("info", "warning", "critical")
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
USER_AGENT = "Watchkeeper-monitor/1"
SITE = "the site"  # whose words a reason from the site's answer are


_KIND_FIELDS = tuple(dict.fromkeys((*HTTP_FIELDS, *HEARTBEAT_FIELDS, *CHANGE_FIELDS)))


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
    kind: Kind,
    given: Mapping[str, Any],
    current: MonitorSettings | None,
    limits: MonitorLimits,
) -> MonitorSettings:
    """The settings of a ``kind`` monitor: ``current`` (stored; None for a new one) with
    ``given`` (the tool's or the API's arguments) over it (None = unchanged), checked;
    raises ``MonitorError`` naming the field."""
    given = {k: v for k, v in given.items() if v is not None}
    wrong = [k for k in _KIND_FIELDS if k in given and k not in FIELDS[kind]]
    if wrong:
        fits = " or ".join(KIND_NAMES[k] for k in KINDS if wrong[0] in FIELDS[k])
        raise MonitorError(f"{', '.join(wrong)} only apply to {fits}, not a {kind} monitor")
    held = {} if current is None else asdict(current)
    merged = {**{k: v for k, v in held.items() if v is not None}, **given}
    name = _text(merged.get("name"), "name", NAME_LIMIT)
    severity = merged.get("severity") or ("info" if kind == "change" else "warning")
    if severity not in SEVERITIES:
        raise MonitorError(
            f"severity must be info, warning or critical; got {str(severity)[:40]!r}"
        )
    least = limits.min_interval_seconds
    if kind in ("http", "change"):
        if merged.get("url") is None:
            raise MonitorError(f"url is required for {KIND_NAMES[kind]}")
        url = check_url(merged["url"])
        if kind == "change":
            least = max(least, limits.min_change_interval_seconds)
        interval = merged.get("interval_seconds", 60 if kind == "http" else 900)
        if kind == "change" and isinstance(interval, int) and 0 < interval < least:
            raise MonitorError(
                f"interval_seconds is {interval}; a change monitor fetches its page at most "
                f"every {least} s ({least // 60} min), so give {least} or more"
            )
        hint = f" (a check at most every {least} s)"
        checked = MonitorSettings(
            name=name,
            severity=severity,
            url=url,
            interval_seconds=_whole(interval, "interval_seconds", least, MAX_INTERVAL, hint),
            keyword=_optional(merged.get("keyword"), lambda k: _text(k, "keyword", KEYWORD_LIMIT)),
            failures_before_alert=_whole(
                merged.get("failures_before_alert", 2), "failures_before_alert", 1, MAX_FAILURES
            ),
        )
        if kind == "change":
            return replace(checked, selector=_optional(merged.get("selector"), _selector))
        status = merged.get("expect_status")
        if status == 0:  # any 2xx or 3xx again
            status = None
        expect = None if status is None else _whole(status, "expect_status", 100, 599)
        return replace(checked, expect_status=expect)
    if merged.get("period_seconds") is None:
        raise MonitorError(
            "period_seconds is required for a heartbeat: how often the job pings, in seconds"
        )
    period = _whole(merged["period_seconds"], "period_seconds", least, MAX_PERIOD)
    grace = merged.get("grace_seconds")
    if grace is None:  # a tenth of the period, from a minute to an hour
        grace = min(max(period // 10, 60), 3600)
    return MonitorSettings(
        name=name,
        severity=severity,
        period_seconds=period,
        grace_seconds=_whole(grace, "grace_seconds", 0, MAX_GRACE),
    )


def _optional(value: Any, check: Callable[[Any], str]) -> str | None:
    """An optional text setting: absent or empty is None, else ``check(value)``."""
    return None if value in (None, "") else check(value)


def _selector(value: Any) -> str:
    if not isinstance(value, str):
        raise MonitorError("selector must be a text, such as '.price' or '#total'")
    try:
        return parse_selector(value).text
    except SelectorError as exc:
        raise MonitorError(str(exc)) from None
