"""The alert router end to end: severity routing, escalation, budgets, fall-over.

Offline: a fake Twilio API, a recording chat channel, the test database, and a
manual clock; escalation steps run through ``router.tick()``.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.alerts.policy import RoutingPolicy
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_PHONE, OWNER_TG, alert_app
from tests.fakes.twilio_api import twilio_error


# -- severity routing and escalation ---------------------------------------------------
@pytest.mark.every_database
async def test_critical_pages_again_after_15_minutes_until_acknowledged(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(
            severity="critical", title="NAS disk full", body="/volume1 at 99%"
        )
        code = alert.code
        assert len(h.twilio.sent) == 1
        first = h.twilio.sent[0]
        assert first.to == OWNER_PHONE and f"#{code}" in first.body and f"{code}a" in first.body
        assert len(h.chat.sent) == 1 and h.chat.sent[0].chat_id == str(OWNER_TG)

        await h.tick(minutes=14)
        assert len(h.twilio.sent) == 1
        await h.tick(minutes=1)
        assert len(h.twilio.sent) == 2 and "not acknowledged" in h.sms[1]

        resp = await h.sms_in("ack")
        assert resp.status == 200
        assert h.sms[-1] == f"#{code} acknowledged, escalation stopped."
        assert h.model.requests == []  # a directive never reaches the model

        for _ in range(4):
            await h.tick(minutes=15)
        assert len(h.twilio.sent) == 3  # two pages and the confirmation, nothing more
        doc = await _alert(h.app, code)
        assert doc["status"] == "acknowledged" and doc["next_escalation_at"] is None
        actions = [(e["by"], e["action"]) for e in doc["history"]]
        assert ("owner via sms", "acknowledged") in actions

        await h.sms_in("ack")
        assert h.sms[-1] == f"#{code} was already acknowledged."


async def test_critical_paging_stops_after_four_sms(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="critical", title="Router down")
        for _ in range(8):
            await h.tick(minutes=15)
        assert len(h.twilio.sent) == 4
        assert "Page 4 of 4" in h.sms[-1]


async def test_warning_goes_to_chat_then_sms_after_30_minutes(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="warning", title="Backup is late")
        assert len(h.chat.sent) == 1 and h.twilio.sent == []
        await h.tick(minutes=29)
        assert h.twilio.sent == []
        await h.tick(minutes=1)
        assert len(h.twilio.sent) == 1
        assert "Not acknowledged after 30m" in h.sms[0] and f"#{alert.code}" in h.sms[0]
        await h.tick(minutes=60)
        assert len(h.twilio.sent) == 1  # a warning pages once


async def test_acknowledged_warning_never_pages(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.chat.say("ok")
        await h.settle()
        assert h.chat.texts()[-1] == f"#{alert.code} acknowledged, escalation stopped."
        await h.tick(minutes=45)
        assert h.twilio.sent == []


async def test_info_goes_to_the_primary_chat_only(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="info", title="New firmware available")
        await h.tick(hours=3)
        assert len(h.chat.sent) == 1 and h.twilio.sent == []


async def test_telegram_alert_carries_code_reply_help_and_buttons(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="warning", title="Cert expires soon")
        code = alert.code
        message = h.chat.sent[0]
        assert f"#{code}" in message.text and "Reply ack, snooze 1h" in message.text
        assert [(b.label, b.data) for b in message.buttons] == [
            ("Ack", f"a:ack:{code}"),
            ("Snooze 1h", f"a:snz:{code}"),
            ("Resolve", f"a:res:{code}"),
        ]
        await h.chat.press(message.buttons[1].data, on="1")  # pressing "Snooze 1h"
        await h.settle()
        snoozed = await h.router.store.by_code(code)
        assert snoozed is not None and snoozed.status == "snoozed"
        assert h.chat.texts()[-1] == "💤 Snoozed for 1h by you at 10:00\n" + (
            f"#{code} snoozed for 1h, until 11:00."
        )


@pytest.mark.every_database
async def test_restart_during_escalation_carries_on(app_db: AppDb, tmp_path: Any) -> None:
    name = f"restart_{tmp_path.name[-8:]}"
    async with alert_app(app_db, db_name=name) as first:
        clock, twilio = first.clock, first.twilio
        await first.router.raise_alert(severity="critical", title="UPS on battery")
        assert len(first.twilio.sent) == 1
        async with alert_app(app_db, db_name=name, clock=clock, twilio=twilio) as second:
            pass  # started and stopped: nothing due yet, nothing sent
        assert len(twilio.sent) == 1
    async with alert_app(app_db, db_name=name, clock=clock) as second:
        await second.tick(minutes=15)
        assert len(second.twilio.sent) == 1 and "Page 2 of 4" in second.sms[0]
        await second.sms_in("1a")  # GoAlert-style shorthand
        assert second.sms[-1] == "#1 acknowledged, escalation stopped."
        await second.app.database.client.drop_database(name)


async def test_a_refused_page_goes_to_the_chats_instead(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        refused = twilio_error(400, 21610, "Attempt to send to unsubscribed recipient")
        h.twilio.push(refused, times=2)
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        assert h.twilio.sent == [] and len(h.chat.sent) == 1
        await h.tick(minutes=15)
        assert h.twilio.sent == [] and "Page 2 of 4" in h.chat.texts()[-1]
        doc = await _alert(h.app, alert.code)
        escalated = [e["detail"] for e in doc["history"] if e["action"] == "escalated"]
        assert doc["sms_sent"] == 0 and escalated[-1] == "telegram; sms failed"


async def test_sms_budget_caps_pages_and_tells_the_owner_once(app_db: AppDb) -> None:
    async with alert_app(app_db, policy=RoutingPolicy(sms_per_hour=3)) as h:
        for n in range(5):
            await h.router.raise_alert(severity="critical", title=f"Sensor {n} offline")
        assert len(h.twilio.sent) == 3
        notices = [t for t in h.chat.texts() if t.startswith("SMS budget reached")]
        assert len(notices) == 1 and "3 per hour" in notices[0] and "#4" in notices[0]
        doc = await _alert(h.app, "5")
        assert "sms budget" in doc["history"][-1]["detail"]
        await h.tick(minutes=61)  # the hour has passed: pages flow again
        assert len(h.twilio.sent) == 6


async def test_quiet_hours_hold_a_warning_but_not_a_critical(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.owner.update(quiet_hours=[{"start": "09:30", "end": "11:00"}])
        warning = await h.router.raise_alert(severity="warning", title="Slow DNS")
        assert h.chat.sent == [] and warning.alert.held is True
        critical = await h.router.raise_alert(severity="critical", title="Server on fire")
        assert len(h.twilio.sent) == 1
        assert [f"#{critical.code}" in t for t in h.chat.texts()] == [True]
        await h.tick(minutes=59)
        assert len(h.chat.sent) == 1
        await h.tick(minutes=1)  # 11:00, quiet hours over
        assert f"#{warning.code}" in h.chat.texts()[-1]
        doc = await _alert(h.app, warning.code)
        assert doc["held"] is False and any(e["action"] == "held" for e in doc["history"])


async def test_same_dedupe_key_is_counted_not_resent(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        first = await h.router.raise_alert(
            severity="warning", title="Ping loss", dedupe_key="ping:gw"
        )
        for _ in range(3):
            again = await h.router.raise_alert(
                severity="warning", title="Ping loss", dedupe_key="ping:gw"
            )
            assert again.deduplicated is True and again.code == first.code
        assert len(h.chat.sent) == 1
        assert (await _alert(h.app, first.code))["count"] == 4
        worse = await h.router.raise_alert(
            severity="critical", title="Ping loss", dedupe_key="ping:gw"
        )
        assert worse.code == first.code and worse.alert.severity == "critical"
        assert len(h.twilio.sent) == 1 and "Now CRITICAL" in h.chat.texts()[-1]
        await h.router.apply(first.code, _resolve(), "test")
        fresh = await h.router.raise_alert(
            severity="warning", title="Ping loss", dedupe_key="ping:gw"
        )
        assert fresh.code != first.code and fresh.deduplicated is False


def _resolve() -> Any:
    from agent.alerts.directives import Resolve

    return Resolve()


async def test_failed_primary_chat_falls_over_to_the_next(app_db: AppDb) -> None:
    async with alert_app(app_db, extra_chats=("console",)) as h:
        h.chat.failing = True
        alert = await h.router.raise_alert(severity="info", title="Update ready")
        console = h.extra_chats[0]
        assert [f"#{alert.code}" in t for t in console.texts()] == [True]
        outbox = h.app.database.db["outbox"]
        tg = await outbox.find_one({"idempotency_key": f"alert:{alert.code}:0:telegram"})
        assert tg is not None and tg["status"] == "superseded"


async def test_a_chat_channel_that_says_it_is_down_is_tried_last(app_db: AppDb) -> None:
    async with alert_app(app_db, extra_chats=("console",)) as h:
        h.chat.connected = False
        alert = await h.router.raise_alert(severity="info", title="Update ready")
        console = h.extra_chats[0]
        assert [f"#{alert.code}" in t for t in console.texts()] == [True]
        outbox = h.app.database.db["outbox"]
        assert await outbox.find_one({"idempotency_key": {"$regex": "telegram$"}}) is None
