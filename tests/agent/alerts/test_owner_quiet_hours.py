"""Quiet hours and the primary channel, set with ``manage_settings``, as the alert router
and the cron delivery see them (DESIGN.md, "Alerts and directives")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.app.features.scheduling import SchedulingOptions, scheduling
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_PHONE, OWNER_TG, START, alert_app
from tests.scheduling_kit import call_tool

SCHEDULING = (scheduling(SchedulingOptions(timer=False)),)


async def _settings(h: Any, **change: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(h.app, "manage_settings", action="update", **change)
    assert result.get("success"), result
    return result


async def test_quiet_hours_hold_info_and_warning_until_they_end_and_let_critical_through(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, timezone="Europe/Berlin") as h:  # 11:00 in Berlin
        reply = await _settings(h, quiet_hours=[{"start": "10:30", "end": "12:15"}])
        assert reply["quiet_now"] is True and reply["quiet_until"] == "2026-11-26T12:15+01:00"
        assert "critical alerts" in reply["quiet"] and "delivered" in reply["quiet"]
        info = await h.router.raise_alert(severity="info", title="Backup finished late")
        warning = await h.router.raise_alert(severity="warning", title="Disk 91% full")
        assert info.alert.held is True and warning.alert.held is True
        assert h.chat.sent == [] and h.sms == []
        critical = await h.router.raise_alert(severity="critical", title="Site down")
        assert len(h.sms) == 1 and "Site down" in h.sms[0]
        assert [t.split("\n")[0] for t in h.chat.texts()] == ["🚨 CRITICAL #3: Site down"]
        await h.tick(minutes=74)  # 12:14: still quiet
        assert len(h.chat.sent) == 1
        await h.tick(minutes=1)  # 12:15: quiet hours over, both delivered
        held = h.chat.texts()[1:]
        assert len(held) == 2
        assert f"#{info.code}" in held[0] or f"#{info.code}" in held[1]
        assert any(f"#{warning.code}" in text for text in held)
        assert critical.code == "3"


async def test_turning_quiet_hours_off_lets_an_info_alert_through_at_night(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db) as h:
        h.clock.set(datetime(2026, 11, 26, 23, 30, tzinfo=UTC))  # default quiet 22:00-07:00
        held = await h.router.raise_alert(severity="info", title="Nightly report")
        assert held.alert.held is True and h.chat.sent == []
        reply = await _settings(h, quiet_hours=[])
        assert reply["quiet_hours"] == [] and reply["quiet"].startswith("off")
        await h.tick()  # the held one is due at once, not at 07:00
        assert [f"#{held.code}" in t for t in h.chat.texts()] == [True]
        sent = await h.router.raise_alert(severity="info", title="Another report")
        assert sent.alert.held is False
        assert [f"#{sent.code}" in t for t in h.chat.texts()] == [False, True]


async def test_new_quiet_hours_hold_a_held_alert_to_their_new_end(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:  # 10:00 UTC
        await _settings(h, quiet_hours=[{"start": "09:00", "end": "12:00"}])
        held = await h.router.raise_alert(severity="warning", title="Slow disk")
        await _settings(h, quiet_hours=[{"start": "09:00", "end": "10:30"}])
        await h.tick()
        doc = await h.app.database.db["alerts"].find_one({"code": held.code})
        assert doc is not None and doc["held"] is True
        assert doc["next_escalation_at"].replace(tzinfo=UTC) == START.replace(minute=30)
        await h.tick(minutes=30)
        assert [f"#{held.code}" in t for t in h.chat.texts()] == [True]


async def test_a_cron_delivery_in_quiet_hours_is_delivered(app_db: AppDb) -> None:
    async with alert_app(app_db, features=SCHEDULING) as h:
        await _settings(h, quiet_hours=[{"start": "09:00", "end": "12:00"}])
        parts = h.app.scheduling
        assert parts is not None
        job = await parts.jobs.create(
            name="Stretch",
            instruction="remind me to stretch",
            cron_expression="30 10 * * *",
            origin_channel="telegram",
            origin_chat_id=str(OWNER_TG),
        )
        h.clock.set(START.replace(minute=30))
        fires = await parts.engine.run_due()
        assert [f.job_id for f in fires] == [job.id]
        assert h.chat.texts() == ["Stretch\nagent answer"]


async def test_primary_channel_puts_that_chat_first(app_db: AppDb) -> None:
    async with alert_app(app_db, extra_chats=("whatsapp",), features=SCHEDULING) as h:
        [whatsapp] = h.extra_chats
        await h.router.raise_alert(severity="info", title="Before")
        assert len(h.chat.sent) == 1 and whatsapp.sent == []  # Telegram by default
        reply = await _settings(h, primary_channel="whatsapp")
        assert reply["primary_channel"] == "whatsapp"
        await h.router.raise_alert(severity="info", title="After")
        assert len(h.chat.sent) == 1
        assert [m.chat_id for m in whatsapp.sent] == [OWNER_PHONE]
        assert "After" in whatsapp.sent[0].text
        # A cron job whose chat is not running here goes to the primary chat too.
        parts = h.app.scheduling
        assert parts is not None
        await parts.jobs.create(
            name="Gone",
            instruction="x",
            cron_expression="0 11 * * *",
            origin_channel="signal",
            origin_chat_id="1",
        )
        h.clock.set(START.replace(hour=11))
        await parts.engine.run_due()
        assert whatsapp.texts()[-1] == "Gone\nagent answer"
