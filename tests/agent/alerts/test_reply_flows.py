"""Replies that take more than one step (issue #13): ack all / close all with their
confirmation, escalate, and short acknowledgements with their window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.alerts.policy import RoutingPolicy, sms_text
from storage.repos.alert_record import Alert
from storage.repos.alert_routing import RoutingOverrides
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app


async def _statuses(h: Harness, *codes: str) -> list[str]:
    return [(await _alert(h.app, code))["status"] for code in codes]


# -- ack all / close all ---------------------------------------------------------------------
async def test_close_all_asks_once_then_resolves_exactly_those_alerts(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Disk")
        await h.router.raise_alert(severity="info", title="Backup")
        await h.chat.say("2cc")
        await h.settle()
        assert h.chat.texts()[-1] == (
            "Resolve all 2 alerts (#1, #2)? Send 2cc again within 10 min to confirm."
        )
        assert await _statuses(h, "1", "2") == ["open", "open"]
        await h.router.raise_alert(severity="warning", title="Raised meanwhile")
        await h.chat.say("'2CC'")
        await h.settle()
        assert h.chat.texts()[-1] == "Resolved 2 alerts: #1, #2."
        assert await _statuses(h, "1", "2", "3") == ["resolved", "resolved", "open"]
        assert h.model.requests == []


async def test_ack_all_leaves_muted_alerts_alone_and_its_question_expires(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db) as h:
        for title in ("A", "B", "C"):
            await h.router.raise_alert(severity="warning", title=title)
        await h.chat.say("#2 mute 1d")
        await h.chat.say("ack all")
        await h.settle()
        assert h.chat.texts()[-1].startswith("Acknowledge all 2 alerts (#1, #3)? Send 'ack all'")
        h.clock.advance(minutes=11)
        await h.chat.say("ack all")  # too late: asked again
        await h.settle()
        assert h.chat.texts()[-1].startswith("Acknowledge all 2 alerts (#1, #3)?")
        await h.chat.say("3aa")  # any code: it is the same request
        await h.settle()
        assert h.chat.texts()[-1] == "Acknowledged 2 alerts: #1, #3."
        assert await _statuses(h, "1", "2", "3") == ["acknowledged", "muted", "acknowledged"]


async def test_bulk_with_nothing_open_says_so(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.chat.say("12cc")
        await h.settle()
        assert h.chat.texts() == ["No open alerts to resolve."]


# -- escalate --------------------------------------------------------------------------------
async def test_escalate_pages_now_and_reopens_an_acknowledged_alert(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.chat.say("ack")
        await h.chat.say("e")
        await h.settle()
        assert h.chat.texts()[-1] == "#1 escalated: paged by SMS."
        assert len(h.sms) == 1 and h.sms[0].startswith("Escalated on request. WARNING #1")
        assert await _statuses(h, "1") == ["open"]
        await h.tick(hours=2)
        assert len(h.sms) == 1  # a warning's one page is spent: no timer runs on
        await h.sms_in("1e")  # asked again: another page
        assert len(h.twilio.sent) == 3 and h.sms[-1] == "#1 escalated: paged by SMS."
        await h.sms_in("1c")
        await h.sms_in("e 1")
        assert h.sms[-1] == "#1 is resolved; there is nothing to escalate."
        assert h.model.requests == []


async def test_escalate_ignores_quiet_hours_and_falls_back_to_chats(app_db: AppDb) -> None:
    async with alert_app(app_db, twilio_account_sid=None) as h:
        await h.router.owner.update(quiet_hours=[{"start": "09:00", "end": "12:00"}])
        await h.router.raise_alert(severity="warning", title="Held by quiet hours")
        assert h.chat.sent == []
        await h.chat.say("escalate #1")
        await h.settle()
        assert h.chat.texts()[0].startswith("Escalated on request.")
        assert h.chat.texts()[-1] == "#1 escalated to telegram: SMS is not set up."


async def test_escalate_a_muted_alert_asks_to_unmute(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Flappy")
        await h.chat.say("mute 1h")
        await h.chat.say("e")
        await h.settle()
        assert h.chat.texts()[-1] == "#1 is muted; unmute it first."
        assert h.sms == []


# -- short acknowledgements ------------------------------------------------------------------
async def test_short_ack_on_sms_needs_the_alert_to_be_the_last_thing_sent(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="critical", title="Pump failure")
        await h.sms_in("what's on today?")
        await h.sms_in("thx")  # thanks for the answer, not for the page
        assert len(h.model.requests) == 2 and await _statuses(h, "1") == ["open"]
        assert "The owner did not name the alert" in h.model.requests[1].read
        await h.tick(minutes=15)  # the second page is the last thing sent
        await h.sms_in("k")
        assert h.sms[-1] == "#1 acknowledged, escalation stopped."
        assert len(h.model.requests) == 2


async def test_short_ack_window_expires(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="critical", title="Pump failure")
        h.clock.advance(minutes=31)
        await h.sms_in("ok thanks")
        assert len(h.model.requests) == 1 and await _statuses(h, "1") == ["open"]


async def test_short_acks_can_be_turned_off(app_db: AppDb) -> None:
    policy = RoutingPolicy(short_ack_window=timedelta(0))
    async with alert_app(app_db, policy=policy) as h:
        await h.router.raise_alert(severity="critical", title="Pump failure")
        await h.sms_in("k")
        alert_message = await h.app.database.db["outbox"].find_one(
            {"idempotency_key": "alert:1:0:telegram"}
        )
        assert alert_message is not None
        await h.chat.say("👍", reply_to=alert_message["external_ids"][0])
        await h.settle()
        assert len(h.model.requests) == 2 and await _statuses(h, "1") == ["open"]
        await h.sms_in("ack")  # the full word still acks
        assert await _statuses(h, "1") == ["acknowledged"]


async def test_thumbs_up_to_a_confirmation_is_not_an_ack(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.chat.say("snooze 1h")
        await h.settle()
        confirmation = await h.app.database.db["outbox"].find_one(
            {"text": {"$regex": "^#1 snoozed"}}
        )
        assert confirmation is not None
        await h.chat.say("👍", reply_to=confirmation["external_ids"][0])
        await h.settle()
        assert await _statuses(h, "1") == ["snoozed"]
        assert "replied to the message that carried #1" in h.model.requests[0].read


def test_short_ack_window_is_configurable_in_minutes() -> None:
    policy = RoutingPolicy.of(RoutingOverrides.from_doc({"short_ack_window_minutes": 5}))
    assert policy.short_ack_window == timedelta(minutes=5)
    assert RoutingPolicy().short_ack_window == timedelta(minutes=30)


def test_sms_copy_offers_goalerts_forms() -> None:
    alert = Alert(None, "7", "critical", "Pump", "open", datetime(2026, 11, 27, tzinfo=UTC))
    assert sms_text(alert).endswith("Reply 7a to ack, 7c to resolve, or #7 snooze 1h.")


async def test_an_alert_rides_with_free_text_only_soon_after_it_was_sent(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.chat.say("why is that?")
        await h.settle()
        assert "## The alert this message is about" in h.model.requests[-1].read
        await h.tick(minutes=13)  # several topics later: not about the alert any more
        await h.chat.say("what's the weather like tomorrow?")
        await h.settle()
        assert "## The alert this message is about" not in h.model.requests[-1].read
        await h.chat.say("about #1: is it fixed?")  # named by its code: still found
        await h.settle()
        assert "## The alert this message is about" in h.model.requests[-1].read
