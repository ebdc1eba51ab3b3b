"""``warning_sms_after_minutes`` (``manage_settings``) as the alert router applies it.

Set through the tool, read by the router: 0 means a warning never goes by SMS (and the
``raise_alert`` reply says so), any other value is the wait before its SMS. Each step
runs through ``router.tick()`` on the fake clock, so "no SMS" is asserted after the
tick that would have sent one has run, with the alert's timer and history showing it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agent.alerts.directives import Ack
from agent.app.application import App
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import START, Harness, alert_app
from tests.scheduling_kit import call_tool


async def _settings(h: Harness, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(h.app, "manage_settings", **args)
    assert "error" not in result, result
    return result


async def _raise(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="console", chat_id="owner")
    result: dict[str, Any] = await app.catalog.for_context(ctx).call("raise_alert", args, ctx)
    assert "error" not in result, result
    return result


async def _alert(h: Harness, code: str) -> dict[str, Any]:
    doc = await h.app.database.db["alerts"].find_one({"code": code})
    assert doc is not None
    return doc


def _actions(doc: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(e["by"], e["action"], e.get("detail")) for e in doc["history"]]


async def test_get_shows_the_default_and_update_sets_it(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        before = await _settings(h, action="get")
        off = await _settings(h, action="update", warning_sms_after_minutes=0)
        again = await _settings(h, action="update", warning_sms_after_minutes=0)
        five = await _settings(h, action="update", warning_sms_after_minutes=5)
        stored = await h.app.database.db["settings"].find_one({"_id": "owner"})
    assert before["warning_sms_after_minutes"] == 30
    assert before["warning_sms"] == "a warning not acknowledged within 30 min is sent again by SMS"
    assert off["warning_sms_after_minutes"] == 0 and "unchanged" not in off
    assert off["warning_sms"] == "off: warnings never go by SMS, only to the primary chat"
    assert again["unchanged"] == ["warning_sms_after_minutes"]
    assert five["warning_sms_after_minutes"] == 5
    assert stored is not None and stored["warning_sms_after_minutes"] == 5


async def test_zero_a_warning_never_goes_by_sms_and_the_reply_says_so(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await _settings(h, action="update", warning_sms_after_minutes=0)
        reply = await _raise(h.app, severity="warning", title="Backup is late")
        code = reply["alert"]["code"]
        assert reply["delivered"] == ["telegram"]
        assert reply["sms"] == (
            "never for warnings: warning_sms_after_minutes is 0 (manage_settings)"
        )
        assert reply["next"] == "no further reminders"
        doc = await _alert(h, code)
        assert (doc["next_action"], doc["next_escalation_at"]) == (None, None)
        assert await h.tick(hours=2) == 0  # the sweep ran: nothing was due
        assert await h.tick(days=2) == 0
        assert h.twilio.sent == [] and len(h.chat.sent) == 1
        doc = await _alert(h, code)
        assert doc["status"] == "open" and doc["sms_sent"] == 0


async def test_zero_no_chat_took_it_still_no_sms(app_db: AppDb) -> None:
    """The SMS a warning gets when no chat takes it is an SMS too: off with 0."""
    async with alert_app(app_db, telegram=False) as h:
        await _settings(h, action="update", warning_sms_after_minutes=0)
        reply = await _raise(h.app, severity="warning", title="Backup is late")
        assert reply["delivered"] == []
        assert reply["problem"] == "no channel took the alert; it is stored and listed as open"
        assert reply["sms"].startswith("never for warnings")
        assert await h.tick(hours=1) == 0
        assert h.twilio.sent == []


async def test_five_the_sms_is_due_five_minutes_after(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await _settings(h, action="update", warning_sms_after_minutes=5)
        reply = await _raise(h.app, severity="warning", title="Backup is late")
        code = reply["alert"]["code"]
        assert reply["sms"] == "will be sent at 10:05+00:00 if not acknowledged"
        doc = await _alert(h, code)
        assert doc["next_action"] == "sms"
        assert doc["next_escalation_at"] == START + timedelta(minutes=5)
        assert await h.tick(minutes=4) == 0
        assert h.twilio.sent == []
        assert await h.tick(minutes=1) == 1
        assert len(h.twilio.sent) == 1
        assert "Not acknowledged after 5m" in h.sms[0] and f"#{code}" in h.sms[0]


async def test_a_change_moves_the_timer_of_a_warning_already_waiting(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        first = await h.router.raise_alert(severity="warning", title="Disk 91% full")
        second = await h.router.raise_alert(severity="warning", title="Slow DNS")
        h.clock.advance(minutes=2)
        await _settings(h, action="update", warning_sms_after_minutes=5)
        doc = await _alert(h, first.code)
        assert doc["next_escalation_at"] == START + timedelta(minutes=5)
        assert ("owner", "sms wait changed", "30m -> 5m") in _actions(doc)
        await h.router.apply(second.code, Ack(), "owner")
        await _settings(h, action="update", warning_sms_after_minutes=0)
        acked = await _alert(h, second.code)
        assert [a for a in _actions(acked) if a[1] == "sms wait changed"] == [
            ("owner", "sms wait changed", "30m -> 5m")
        ]  # acknowledged: its timer had stopped, nothing to move
        doc = await _alert(h, first.code)
        assert (doc["next_action"], doc["next_escalation_at"]) == (None, None)
        assert _actions(doc)[-1] == (
            "owner",
            "sms wait changed",
            "warnings never go by SMS (warning_sms_after_minutes is 0)",
        )
        assert await h.tick(hours=1) == 0
        assert h.twilio.sent == []


async def test_zero_stops_a_page_held_for_quiet_hours(app_db: AppDb) -> None:
    """A warning whose SMS step was held by quiet hours keeps its timer through the
    change; the step itself reads the setting when quiet hours end."""
    async with alert_app(app_db) as h:  # 10:00 UTC
        alert = await h.router.raise_alert(severity="warning", title="Backup is late")
        await _settings(h, action="update", quiet_hours=[{"start": "10:15", "end": "11:00"}])
        assert await h.tick(minutes=30) == 1  # 10:30: the SMS step, held
        doc = await _alert(h, alert.code)
        assert doc["held"] is True and doc["next_action"] == "sms"
        await _settings(h, action="update", warning_sms_after_minutes=0)
        assert await h.tick(minutes=30) == 1  # 11:00: quiet hours over, the step runs
        doc = await _alert(h, alert.code)
        assert (doc["next_action"], doc["next_escalation_at"]) == (None, None)
        assert _actions(doc)[-1] == (
            "router",
            "not paged",
            "warnings never go by SMS (warning_sms_after_minutes is 0)",
        )
        assert h.twilio.sent == []
