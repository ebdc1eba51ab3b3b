"""What happened to a raised alert, in words a model can relay to the owner truthfully.

The router records the facts of one raise (``routing_facts``: where it went, what the
SMS page did, the next timer); ``describe`` turns them into the ``raise_alert`` reply.
Nothing in the reply is a bare counter that could be misread: an SMS that was never
possible says "not configured", never ``0``, and a promise of a repeat is made only
when a timer for it is armed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from agent.alerts.policy import RoutingPolicy, model_field
from storage.repos.alert_record import Action, Alert

NO_MORE = "no further reminders"


@dataclass(frozen=True)
class RoutingFacts:
    """Where one raise went and what comes next, read back from the stored alert."""

    sent_now: bool
    """False for a repeat that was only counted."""
    delivered: tuple[str, ...]
    """The channels that took it at this raise."""
    page: str | None
    """How the SMS page went (``sending.Paged``), None when none was tried."""
    sms_ready: bool
    sms_per_hour: int
    budget_frees_at: datetime | None
    held_until: datetime | None
    next_action: Action | None
    next_at: datetime | None
    pages_left: int
    repeat_every: timedelta
    warning_sms_after: timedelta

    def to_json(self) -> dict[str, Any]:
        """The ``routing`` object of ``POST /api/alerts`` (``json.dumps(default=str)``)."""
        out = asdict(self)
        out["delivered"] = list(self.delivered)
        return out


@dataclass(frozen=True)
class Raised:
    """What ``AlertRouter.raise_alert`` did: the alert as stored now, whether it was a
    repeat of an open one, and where it went."""

    alert: Alert
    deduplicated: bool
    routing: RoutingFacts

    @property
    def code(self) -> str:
        return self.alert.code

    def view(self) -> dict[str, Any]:
        """The answer of ``POST /api/alerts``: the alert's public fields, ``deduplicated``
        and ``routing``."""
        return {
            **self.alert.public(),
            "deduplicated": self.deduplicated,
            "routing": self.routing.to_json(),
        }


def routing_facts(
    alert: Alert,
    now: datetime,
    policy: RoutingPolicy,
    *,
    sent_now: bool,
    sms_ready: bool,
    sms_per_hour: int,
    budget_frees_at: datetime | None = None,
) -> RoutingFacts:
    """The facts of the raise handled at ``now``, read back from the stored ``alert``;
    ``sent_now`` is False for a repeat that was only counted."""
    deliveries = alert.deliveries if sent_now else ()
    return RoutingFacts(
        sent_now=sent_now,
        delivered=tuple(d.channel for d in deliveries if _same(d.at, now)),
        page=alert.last_page if sent_now else None,
        sms_ready=sms_ready,
        sms_per_hour=sms_per_hour,
        budget_frees_at=budget_frees_at,
        held_until=alert.next_escalation_at if alert.held else None,
        next_action=alert.next_action,
        next_at=alert.next_escalation_at,
        pages_left=max(0, policy.critical_max_sms - alert.sms_rounds),
        repeat_every=policy.critical_repeat_every,
        warning_sms_after=policy.warning_sms_after,
    )


def _same(stored: datetime, now: datetime) -> bool:
    """``stored`` (read back from MongoDB: milliseconds) is ``now``."""
    return abs(stored - now) < timedelta(milliseconds=1)


def _at(moment: datetime, now: datetime, tz: tzinfo) -> str:
    """``14:35+01:00`` today, else the full ``2026-11-27T14:35+01:00``."""
    local = moment.astimezone(tz)
    if local.date() == now.astimezone(tz).date():
        return local.isoformat(timespec="minutes").split("T", 1)[1]
    return local.isoformat(timespec="minutes")


def _minutes(delay: timedelta) -> str:
    return f"{int(delay.total_seconds() // 60)} min"


def _page_text(facts: RoutingFacts, now: datetime, tz: tzinfo) -> str:
    page = facts.page
    if page == "sent":
        return "sent"
    if page == "budget":
        frees = facts.budget_frees_at
        again = f"; SMS possible again at {_at(frees, now, tz)}" if frees else ""
        return f"hourly SMS budget used up ({facts.sms_per_hour} per hour){again}"
    if page == "failed":
        return "failed: the SMS provider refused it"
    return "not configured"


def _next(severity: str, facts: RoutingFacts, now: datetime, tz: tzinfo) -> str:
    """The next step the armed timer will take, if any."""
    held, at = facts.held_until, facts.next_at
    if held is not None:
        return f"sent at {_at(held, now, tz)} when quiet hours end"
    if facts.next_action != "sms" or at is None:
        return NO_MORE
    how = "SMS" if facts.sms_ready else "a reminder on every chat (SMS is not configured)"
    when = _at(at, now, tz)
    if severity == "critical":
        every = _minutes(facts.repeat_every)
        left = facts.pages_left
        return (
            f"{how} again at {when}, then every {every} until acknowledged "
            f"(at most {left} more time{'s' if left != 1 else ''})"
        )
    return f"{how} at {when} if not acknowledged; {NO_MORE} after that"


def _sms(severity: str, facts: RoutingFacts, now: datetime, tz: tzinfo) -> str:
    if facts.page is not None:
        return _page_text(facts, now, tz)
    if not facts.sms_ready:
        return "not configured"
    if severity == "info":
        return "not used for info alerts"
    if severity == "warning" and not facts.warning_sms_after:
        return "never for warnings: warning_sms_after_minutes is 0 (manage_settings)"
    held = facts.held_until
    if severity == "warning" and held is not None:
        at = _at(held + facts.warning_sms_after, now, tz)
        return f"will be sent at {at} if not acknowledged by then"
    if facts.next_action == "sms" and facts.next_at is not None:
        return f"will be sent at {_at(facts.next_at, now, tz)} if not acknowledged"
    return "not sent"


def describe(raised: Raised, now: datetime, tz: tzinfo) -> dict[str, Any]:
    """The ``raise_alert`` reply for what the router did (``raised``)."""
    stored, facts = raised.alert, raised.routing
    severity, code = stored.severity, stored.code
    alert = {  # outside words (a posted alert's) in their block
        "code": code,
        "severity": severity,
        "title": model_field(stored, "title"),
        "status": stored.status,
    }
    reply: dict[str, Any] = {"alert": alert}
    if raised.deduplicated and not facts.sent_now:
        reply["deduplicated"] = (
            f"same dedupe_key as open alert #{code}: counted (seen {stored.count} "
            "times), not sent again"
        )
        reply["delivered"] = []
        reply["next"] = _next(severity, facts, now, tz)
        return reply
    if raised.deduplicated:
        reply["deduplicated"] = f"alert #{code} raised to {severity}: sent again"
    delivered = list(facts.delivered)
    reply["delivered"] = delivered
    if facts.held_until is not None:
        reply["held_until"] = facts.held_until
    elif not delivered:
        reply["problem"] = "no channel took the alert; it is stored and listed as open"
    reply["sms"] = _sms(severity, facts, now, tz)
    reply["next"] = _next(severity, facts, now, tz)
    return reply
