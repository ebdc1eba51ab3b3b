"""Where and when an alert goes: the routing policy, targets, and the texts (quiet hours
are the owner's: ``agent.owner``).

The defaults are DESIGN.md's; a ``settings`` document ``{"_id": "alert_routing"}`` may
override the numbers (read and checked by ``storage.repos.alert_routing``, a bad field
named in the log), so routing can be tuned without a redeploy. The owner's own
``warning_sms_after_minutes`` (``manage_settings``) wins over both (``RoutingPolicy.for_owner``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from zoneinfo import ZoneInfo

from agent.alerts.directives import format_duration, help_text
from agent.llm.untrusted import for_model
from agent.owner import OwnerPrefs
from channels.types import Button, Press
from storage.outside import Outside
from storage.repos.alert_record import Alert, Severity, TextField
from storage.repos.alert_routing import RoutingOverrides

log = logging.getLogger(__name__)
LABELS: Mapping[Severity, str] = MappingProxyType(
    {"info": "INFO", "warning": "WARNING", "critical": "CRITICAL"}
)
ICONS: Mapping[Severity, str] = MappingProxyType({"info": "ℹ️", "warning": "⚠️", "critical": "🚨"})
SMS_BODY_CHARS = 240
"""SMS copies stay short: GSM-7, one or two segments; the full text is on chat."""


@dataclass(frozen=True)
class RoutingPolicy:
    """Severity routing numbers (DESIGN.md defaults)."""

    warning_sms_after: timedelta = timedelta(minutes=30)
    """An unacknowledged warning goes by SMS this long after it was sent; zero: never."""
    critical_repeat_every: timedelta = timedelta(minutes=15)
    critical_max_sms: int = 4
    """SMS pages per escalation round of a critical alert, the first one included."""
    sms_per_hour: int = 10
    context_window: timedelta = timedelta(minutes=10)
    """A free-text message gets the latest alert as context only if it was sent this
    recently: soon after an alert it is likely the subject; later, a message naming its
    code or replying to it still brings it (never for the rest of the day)."""
    short_ack_window: timedelta = timedelta(minutes=30)
    """A short acknowledgement ("k", "thx", "👍") on SMS or WhatsApp acks the alert sent
    on that channel at most this long ago, if nothing was sent there since; on Telegram
    it must reply to the alert. Zero turns short acknowledgements off everywhere."""

    @classmethod
    def of(cls, overrides: RoutingOverrides) -> RoutingPolicy:
        """The defaults with the numbers set in the database (``routing_overrides``,
        each checked there) over them."""
        changed = {
            f.name: v for f in fields(overrides) if (v := getattr(overrides, f.name)) is not None
        }
        return replace(cls(), **changed)

    def for_owner(self, prefs: OwnerPrefs) -> RoutingPolicy:
        """This policy with the owner's own settings over it."""
        minutes = prefs.warning_sms_after_minutes
        if minutes is None:
            return self
        return replace(self, warning_sms_after=timedelta(minutes=minutes))

    @property
    def warnings_page(self) -> bool:
        """Whether an unacknowledged warning goes by SMS at all."""
        return self.warning_sms_after > timedelta(0)


# -- texts --------------------------------------------------------------------------


def _has_cron(alert: Alert) -> bool:
    return alert.own_source.startswith("cron:")


def _has_pulse(alert: Alert) -> bool:
    return alert.own_source == "pulse"


def _repeats(alert: Alert) -> str:
    return f" (seen {alert.count} times)" if alert.count > 1 else ""


def model_field(alert: Alert, name: TextField, limit: int | None = None) -> str:
    """The alert's field ``name`` as the model reads it: outside words inside their
    untrusted block (``agent.llm.untrusted``), ours as they are; cut to ``limit``."""
    said = alert.outside_part(name)
    text = alert.text(name)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return text if said is None else for_model(Outside(text, said.source))


def _said(outside: Outside, limit: int | None = None) -> str:
    """Outside words quoted as such: in quotes, on one line, cut to ``limit``."""
    text = " ".join(outside.text.split()).replace('"', "'")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return f'"{text}"'


def _head(alert: Alert, label: str) -> str:
    """``LABEL #12: title``; a title from outside is quoted and says whose words it is."""
    return f"{label} #{alert.code}: {title_text(alert)}"


def title_text(alert: Alert) -> str:
    """The title as alert texts show it: ours as it is, outside words quoted with their
    source (``"Disk full" (from grafana via POST /api/alerts)``), then the repeats."""
    said = alert.outside_part("title")
    title = alert.title if said is None else f"{_said(said, 200)} (from {said.source})"
    return f"{title}{_repeats(alert)}"


def quoted_parts(alert: Alert, limit: int | None = None) -> list[str]:
    """The body and the reason as an alert text shows them: our own words as they are,
    outside words quoted and said to be from where they came ("Reason from the site:
    "..."")."""
    parts: list[str] = []
    said = alert.outside_part("body")
    if said is not None and said.text:
        parts.append(f"From {said.source}: {_said(said, limit)}")
    elif alert.body:
        text = alert.body
        if limit is not None and len(text) > limit:
            text = text[: limit - 1].rstrip() + "…"
        parts.append(text)
    reason = alert.outside_part("reason")
    if reason is not None and reason.text:
        parts.append(f"Reason from {reason.source}: {_said(reason, limit)}")
    return parts


def chat_text(alert: Alert, lead: str = "") -> str:
    """The full alert for a chat: code, severity, body, and how to reply."""
    code, severity = alert.code, alert.severity
    head = f"{ICONS[severity]} {_head(alert, LABELS[severity])}"
    reply = help_text(_has_cron(alert), has_pulse=_has_pulse(alert)).replace("#12", f"#{code}")
    parts = [f"{lead}\n{head}" if lead else head]
    parts.extend(quoted_parts(alert))
    parts.append(reply)
    return "\n\n".join(parts)


def sms_text(alert: Alert, lead: str = "") -> str:
    """A short copy for SMS; GoAlert-style ``12a`` / ``12c`` save typing."""
    code = alert.code
    head = _head(alert, LABELS[alert.severity])
    text = f"{lead} {head}" if lead else head
    for part in quoted_parts(alert, SMS_BODY_CHARS):
        text += f"\n{part}"
    return text + f"\nReply {code}a to ack, {code}c to resolve, or #{code} snooze 1h."


ALERT_PRESS = "a"
"""``Press.kind`` of an alert's buttons (``agent.conversation.buttons`` applies them)."""
ALERT_BUTTONS: tuple[tuple[str, str], ...] = (
    ("ack", "Ack"),
    ("snz", "Snooze 1h"),
    ("res", "Resolve"),
)
"""An alert's buttons: the press's action and the label."""


def buttons(alert: Alert) -> tuple[Button, ...]:
    """Ack, Snooze 1h and Resolve, where the channel shows buttons."""
    return tuple(
        Button(label, Press(ALERT_PRESS, action, alert.code).data)
        for action, label in ALERT_BUTTONS
    )


def local_time(moment: datetime, now: datetime, tz: ZoneInfo) -> str:
    """``14:30`` today, ``Tue 14:30`` within a week, else ``3 Dec 14:30``."""
    local, today = moment.astimezone(tz), now.astimezone(tz)
    if local.date() == today.date():
        return local.strftime("%H:%M")
    if timedelta(0) < moment - now < timedelta(days=6):
        return local.strftime("%a %H:%M")
    return f"{local.day} {local.strftime('%b %H:%M')}"


def summary_line(alert: Alert, now: datetime, tz: ZoneInfo) -> str:
    """One line per alert for ``/alerts`` and the pulse context."""
    status: str = alert.status
    if alert.until is not None:
        status += f" until {local_time(alert.until, now, tz)}"
    age = format_duration(now - alert.created_at)
    return (
        f"#{alert.code} {LABELS[alert.severity]} {title_text(alert)} - {status}, raised {age} ago"
    )
