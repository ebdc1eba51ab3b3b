"""What happened to a raised alert, in words a model can relay to the owner truthfully.

The router records the facts of one raise (``routing_facts``: where it went, what the
SMS page did, the next timer); ``describe`` turns them into the ``raise_alert`` reply.
Nothing in the reply is a bare counter that could be misread: an SMS that was never
possible says "not configured", never ``0``, and a promise of a repeat is made only
when a timer for it is armed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from agent.alerts.policy import RoutingPolicy, model_field

Doc = dict[str, Any]
NO_MORE = "no further reminders"


def routing_facts(
    alert: Mapping[str, Any],
    now: datetime,
    policy: RoutingPolicy,
    *,
    sent_now: bool,
    sms_ready: bool,
    sms_per_hour: int,
    budget_frees_at: datetime | None = None,
) -> Doc:
    """The facts of the raise handled at ``now``, read back from the stored ``alert``;
    ``sent_now`` is False for a repeat that was only counted."""
    held = bool(alert.get("held"))
    deliveries = alert.get("deliveries") or [] if sent_now else []
    return {
        "sent_now": sent_now,
        "delivered": [d["channel"] for d in deliveries if _same(d.get("at"), now)],
        "page": alert.get("last_page") if sent_now else None,
        "sms_ready": sms_ready,
        "sms_per_hour": sms_per_hour,
        "budget_frees_at": budget_frees_at,
        "held_until": alert.get("next_escalation_at") if held else None,
        "next_action": alert.get("next_action"),
        "next_at": alert.get("next_escalation_at"),
        "pages_left": max(0, policy.critical_max_sms - int(alert.get("sms_rounds") or 0)),
        "repeat_every": policy.critical_repeat_every,
        "warning_sms_after": policy.warning_sms_after,
    }


def _same(stored: Any, now: datetime) -> bool:
    """``stored`` (read back from MongoDB: milliseconds, maybe naive UTC) is ``now``."""
    if not isinstance(stored, datetime):
        return False
    if stored.tzinfo is None:
        stored = stored.replace(tzinfo=UTC)
    return bool(abs(stored - now) < timedelta(milliseconds=1))


def _at(moment: datetime, now: datetime, tz: tzinfo) -> str:
    """``14:35+01:00`` today, else the full ``2026-11-27T14:35+01:00``."""
    if moment.tzinfo is None:  # naive from MongoDB is UTC
        moment = moment.replace(tzinfo=UTC)
    local = moment.astimezone(tz)
    if local.date() == now.astimezone(tz).date():
        return local.isoformat(timespec="minutes").split("T", 1)[1]
    return local.isoformat(timespec="minutes")


def _minutes(delay: timedelta) -> str:
    return f"{int(delay.total_seconds() // 60)} min"


def _page_text(facts: Mapping[str, Any], now: datetime, tz: tzinfo) -> str:
    page = facts["page"]
    if page == "sent":
        return "sent"
    if page == "budget":
        frees = facts.get("budget_frees_at")
        again = f"; SMS possible again at {_at(frees, now, tz)}" if frees else ""
        return f"hourly SMS budget used up ({facts['sms_per_hour']} per hour){again}"
    if page == "failed":
        return "failed: the SMS provider refused it"
    return "not configured"


def _next(severity: str, facts: Mapping[str, Any], now: datetime, tz: tzinfo) -> str:
    """The next step the armed timer will take, if any."""
    held, at = facts.get("held_until"), facts.get("next_at")
    if held is not None:
        return f"sent at {_at(held, now, tz)} when quiet hours end"
    if facts.get("next_action") != "sms" or at is None:
        return NO_MORE
    how = "SMS" if facts["sms_ready"] else "a reminder on every chat (SMS is not configured)"
    when = _at(at, now, tz)
    if severity == "critical":
        every = _minutes(facts["repeat_every"])
        left = facts["pages_left"]
        return (
            f"{how} again at {when}, then every {every} until acknowledged "
            f"(at most {left} more time{'s' if left != 1 else ''})"
        )
    return f"{how} at {when} if not acknowledged; {NO_MORE} after that"


def _sms(severity: str, facts: Mapping[str, Any], now: datetime, tz: tzinfo) -> str:
    if facts["page"] is not None:
        return _page_text(facts, now, tz)
    if not facts["sms_ready"]:
        return "not configured"
    if severity == "info":
        return "not used for info alerts"
    if severity == "warning" and not facts["warning_sms_after"]:
        return "never for warnings: warning_sms_after_minutes is 0 (manage_settings)"
    held = facts.get("held_until")
    if severity == "warning" and held is not None:
        at = _at(held + facts["warning_sms_after"], now, tz)
        return f"will be sent at {at} if not acknowledged by then"
    if facts.get("next_action") == "sms" and facts.get("next_at") is not None:
        return f"will be sent at {_at(facts['next_at'], now, tz)} if not acknowledged"
    return "not sent"


def describe(view: Mapping[str, Any], now: datetime, tz: tzinfo) -> Doc:
    """The ``raise_alert`` reply for the router's answer ``view``."""
    severity = str(view.get("severity") or "")
    alert = {k: view[k] for k in ("code", "severity", "title", "status") if k in view}
    if "title" in alert:  # outside words (a posted alert's) in their block
        alert["title"] = model_field(view, "title")
    facts: Mapping[str, Any] = view.get("routing") or {}
    reply: Doc = {"alert": alert}
    if view.get("deduplicated") and not facts.get("sent_now"):
        count = int(view.get("count") or 1)
        reply["deduplicated"] = (
            f"same dedupe_key as open alert #{view.get('code')}: counted (seen {count} "
            "times), not sent again"
        )
        reply["delivered"] = []
        if facts:
            reply["next"] = _next(severity, facts, now, tz)
        return reply
    if view.get("deduplicated"):
        reply["deduplicated"] = f"alert #{view.get('code')} raised to {severity}: sent again"
    delivered = list(facts.get("delivered") or [])
    reply["delivered"] = delivered
    if facts.get("held_until") is not None:
        reply["held_until"] = facts["held_until"]
    elif not delivered:
        reply["problem"] = "no channel took the alert; it is stored and listed as open"
    reply["sms"] = _sms(severity, facts, now, tz)
    reply["next"] = _next(severity, facts, now, tz)
    return reply
