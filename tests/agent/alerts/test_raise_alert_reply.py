"""``raise_alert`` says truthfully where the alert went and what comes next.

Each reply is checked against what then really happens (the fake Twilio and the
recording chat), so a promise of a repeat is only made when one is coming. The owner
is in Berlin: START (10:00 UTC) is 11:00+01:00.
"""

from __future__ import annotations

from typing import Any

from agent.alerts.policy import RoutingPolicy
from agent.app.application import App
from agent.tools.alerts import MANAGE_ALERTS, RAISE_ALERT
from storage import collections as c
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app

BERLIN = "Europe/Berlin"
NO_SMS: dict[str, Any] = {
    "twilio_account_sid": None,
    "twilio_auth_token": None,
    "twilio_from_number": None,
}


async def raise_alert(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="console", chat_id="owner")
    result = await app.catalog.for_context(ctx).call("raise_alert", args, ctx)
    assert "error" not in result, result
    return result


async def set_quiet_hours(app: App, *windows: tuple[str, str]) -> None:
    """Quiet hours where the alert router reads them (one place to switch when the
    owner's settings document becomes their only home)."""
    value = [{"start": start, "end": end} for start, end in windows]
    for doc_id in ("pulse", "owner"):
        await app.deps.db[c.SETTINGS].update_one(
            {"_id": doc_id}, {"$set": {"quiet_hours": value}}, upsert=True
        )
    if app.deps.owner is not None:
        await app.deps.owner.load()


def _no_counters(reply: dict[str, Any]) -> None:
    assert "sms_sent" not in str(reply) and "history" not in reply["alert"]


async def test_critical_without_sms_says_not_configured_and_repeats_on_chat(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, timezone=BERLIN, **NO_SMS) as h:
        reply = await raise_alert(h.app, severity="critical", title="Disk full", body="/ at 100%")
        assert reply["alert"] == {
            "code": "1",
            "severity": "critical",
            "title": "Disk full",
            "status": "open",
        }
        assert reply["delivered"] == ["telegram"] and reply["sms"] == "not configured"
        assert reply["next"] == (
            "a reminder on every chat (SMS is not configured) again at 11:15+01:00, then "
            "every 15 min until acknowledged (at most 3 more times)"
        )
        _no_counters(reply)
        await h.tick(minutes=15)  # the promised reminder comes, on chat
        assert len(h.chat.texts()) == 2 and h.sms == []


async def test_critical_with_sms_says_sent_and_when_it_pages_again(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        reply = await raise_alert(h.app, severity="critical", title="Site down")
        assert sorted(reply["delivered"]) == ["sms", "telegram"] and reply["sms"] == "sent"
        assert reply["next"] == (
            "SMS again at 11:15+01:00, then every 15 min until acknowledged (at most 3 more times)"
        )
        _no_counters(reply)
        await h.tick(minutes=15)
        assert len(h.sms) == 2


async def test_budget_used_up_is_said_with_when_sms_can_go_again(app_db: AppDb) -> None:
    policy = RoutingPolicy(sms_per_hour=1)
    async with alert_app(app_db, policy=policy, timezone=BERLIN) as h:
        assert (await raise_alert(h.app, severity="critical", title="A"))["sms"] == "sent"
        h.clock.advance(minutes=5)
        reply = await raise_alert(h.app, severity="critical", title="B")
        assert reply["sms"] == (
            "hourly SMS budget used up (1 per hour); SMS possible again at 12:00+01:00"
        )
        assert reply["delivered"] == ["telegram"] and len(h.sms) == 1


async def test_warning_in_quiet_hours_is_held_and_says_until_when(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        await set_quiet_hours(h.app, ("10:00", "12:00"))
        reply = await raise_alert(h.app, severity="warning", title="Backup slow")
        assert reply["held_until"] == "2026-11-26T12:00:00+01:00"
        assert reply["delivered"] == []
        assert reply["next"] == "sent at 12:00+01:00 when quiet hours end"
        assert reply["sms"] == "will be sent at 12:30+01:00 if not acknowledged by then"
        assert h.chat.texts() == []
        await h.tick(minutes=60)
        assert len(h.chat.texts()) == 1 and h.sms == []
        await h.tick(minutes=30)
        assert len(h.sms) == 1


async def test_warning_outside_quiet_hours_says_when_sms_follows(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        reply = await raise_alert(h.app, severity="warning", title="Cert expires soon")
        assert reply["delivered"] == ["telegram"]
        assert reply["sms"] == "will be sent at 11:30+01:00 if not acknowledged"
        assert reply["next"] == (
            "SMS at 11:30+01:00 if not acknowledged; no further reminders after that"
        )


async def test_info_says_no_sms_and_no_reminders(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        reply = await raise_alert(h.app, severity="info", title="Backup done")
        assert reply["delivered"] == ["telegram"]
        assert reply["sms"] == "not used for info alerts"
        assert reply["next"] == "no further reminders"


async def test_a_repeat_with_the_same_dedupe_key_is_counted_not_sent(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        first = await raise_alert(h.app, severity="warning", title="Fan", dedupe_key="fan")
        assert first["delivered"] == ["telegram"]
        h.clock.advance(minutes=2)
        again = await raise_alert(h.app, severity="warning", title="Fan", dedupe_key="fan")
        assert again["deduplicated"] == (
            "same dedupe_key as open alert #1: counted (seen 2 times), not sent again"
        )
        assert again["delivered"] == [] and "sms" not in again
        assert again["next"] == (
            "SMS at 11:30+01:00 if not acknowledged; no further reminders after that"
        )
        assert len(h.chat.texts()) == 1


async def test_manage_alerts_list_shows_local_times_and_no_counters(app_db: AppDb) -> None:
    async with alert_app(app_db, timezone=BERLIN) as h:
        await raise_alert(h.app, severity="info", title="Backup done")
        ctx = owner_ctx(h.app.deps, channel="console", chat_id="owner")
        listed = await h.app.catalog.for_context(ctx).call("manage_alerts", {"action": "list"}, ctx)
        (alert,) = listed["alerts"]
        assert alert["created_at"] == "2026-11-26T11:00:00+01:00"
        assert "sms_sent" not in alert and "history" not in alert


def test_descriptions_say_what_each_action_needs_and_quiet_hours_hold_warning() -> None:
    severity = RAISE_ALERT.spec().parameters["properties"]["severity"]["description"]
    assert "warning" in severity and "held in quiet hours" in severity
    assert "critical" in severity and "even in quiet hours" in severity
    text = MANAGE_ALERTS.description
    for needs in ("list: no fields", "ack, resolve: code", "snooze, mute: code"):
        assert needs in text
