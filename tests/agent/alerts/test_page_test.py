"""The test page (issue 39, item 2): one test alert through the ladder as configured
(chat, then SMS, then a call), each step in its progress as it happens, ended by the
owner's acknowledgement by any of the usual ways, outside the SMS budget and the call cap.

Over the real HTTP API (``POST /api/page-test``, ``GET /api/page-test/{code}``) of the
whole app on SecantusDB, with the fake Twilio and a recording Telegram chat; Twilio's
callbacks (key press, SMS delivery report) are posted signed, as Twilio signs them.
"""

from __future__ import annotations

from typing import Any

from agent.alerts.calls import CALLS_PER_HOUR
from storage import collections as c
from storage.repos import sms_budget
from tests.agent.alerts.page_test_kit import (
    BEARER,
    finished,
    has_step,
    lines,
    press,
    progress,
    signed_post,
    start,
)
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_PHONE, Harness, alert_app
from tests.fakes.twilio_api import twilio_error
from tests.waiting import until_async


async def test_the_ladder_in_order_and_a_key_press_acknowledges(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        started = await start(h, step_seconds=0, wait_seconds=120)
        code = started["code"]
        assert started["test"] is True and started["done"] is False
        await until_async(lambda: has_step(h, code, "call placed"), "the test call")
        assert "TEST." in h.chat.texts()[0] and f"#{code}" in h.chat.texts()[0]
        assert len(h.twilio.sent) == 1 and h.twilio.sent[0].to == OWNER_PHONE
        assert "This is a test page." in h.twilio.calls[0].twiml
        report = h.twilio.sent[0].fields["StatusCallback"]  # Twilio's delivery report
        sms = {"MessageSid": "SM1", "MessageStatus": "delivered", "AccountSid": "AC1"}
        assert await signed_post(h, report, sms) == 200
        assert await press(h, "4") == 200

        done = await finished(h, code)
        assert lines(done) == [
            "started: chat, sms, call",
            "chat: sent on telegram",
            "sms: sent to +15…0100",
            "call: ringing +15…0100",
            "sms: delivered (Twilio says so)",
            "call: key 4 pressed",
            "acknowledged by call key press",
            "ended: acknowledged by call key press",
        ]
        assert done["answered"] == "acknowledged by call key press" and done["failed"] == []
        assert done["status"] == "resolved"
        assert h.chat.texts()[-1] == f"By phone: #{code} acknowledged, escalation stopped."
        listed = await h.client.get("/api/status", headers=BEARER)
        assert code not in [a["code"] for a in (await listed.json())["alerts"]]


async def test_an_ack_reply_ends_it_and_nothing_more_is_sent(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        code = (await start(h, step_seconds=600, wait_seconds=1200))["code"]
        await until_async(lambda: has_step(h, code, "chat sent"), "the chat step")
        await h.chat.say("ack")
        await h.settle()

        done = await finished(h, code)
        assert lines(done)[-2:] == [
            "acknowledged by telegram reply",
            "ended: acknowledged by telegram reply",
        ]
        assert h.twilio.sent == [] and h.twilio.calls == []  # the walk stopped at the ack
        assert h.chat.texts()[-1] == f"#{code} acknowledged, escalation stopped."


async def test_one_at_a_time(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        code = (await start(h, step_seconds=600, wait_seconds=1200))["code"]
        again = await h.client.post("/api/page-test", headers=BEARER)
        assert again.status == 409
        assert (await again.json())["code"] == code
        bad = await h.client.post("/api/page-test", json={"step_seconds": -1}, headers=BEARER)
        assert bad.status == 400 and "step_seconds" in (await bad.json())["error"]
        await h.chat.say(f"{code}a")
        await finished(h, code)
        assert (await h.client.post("/api/page-test", headers=BEARER)).status == 202


async def budget_left(h: Harness) -> tuple[list[Any], list[Any]]:
    """The SMS budget's send times and the call cap's ring times, as stored."""
    settings = h.app.database.db[c.SETTINGS]
    sms = await settings.find_one({"_id": sms_budget.BUDGET_DOC}) or {}
    calls = await settings.find_one({"_id": f"call_budget:{OWNER_PHONE}"}) or {}
    return list(sms.get("sent") or []), list(calls.get("rang") or [])


async def test_outside_the_sms_budget_and_the_call_cap(app_db: AppDb) -> None:
    """Rule: a test page sends its one SMS and its one call even with the hourly SMS
    budget and the call cap used up, and takes nothing from either."""
    async with alert_app(app_db) as h:
        db, now, store = h.app.database.db, h.clock(), h.router.store
        while await sms_budget.take_sms(db, now, h.router.sms_per_hour):
            pass
        for _ in range(CALLS_PER_HOUR):
            assert await store.take_call(OWNER_PHONE, now, CALLS_PER_HOUR)
        before = await budget_left(h)

        code = (await start(h, step_seconds=0, wait_seconds=120))["code"]
        await until_async(lambda: has_step(h, code, "call placed"), "the test call")
        assert await press(h, "4") == 200
        done = await finished(h, code)

        assert len(h.twilio.sent) == 1 and len(h.twilio.calls) == 1  # one of each
        assert done["failed"] == [] and done["answered"] == "acknowledged by call key press"
        assert await budget_left(h) == before  # the owner's allowance is what it was
        real = await h.router.raise_alert(severity="critical", title="Disk full")
        assert real.alert.last_page == "budget" and len(h.twilio.sent) == 1


async def test_a_refused_sms_is_a_failed_step(app_db: AppDb) -> None:
    async with alert_app(app_db, twilio_voice_calls="off") as h:
        h.twilio.push(twilio_error(400, 21211, "Invalid 'To' Phone Number"))
        code = (await start(h, step_seconds=0, wait_seconds=600))["code"]
        await until_async(lambda: has_step(h, code, "sms failed"), "the failed SMS step")
        await h.chat.say(f"{code}a")
        done = await finished(h, code)
        assert "call: skipped (TWILIO_VOICE_CALLS=off)" in lines(done)
        assert len(done["failed"]) == 1 and done["failed"][0].startswith("sms: FAILED")
        assert done["answered"] == "acknowledged by telegram reply"


async def test_a_test_page_left_running_is_ended_at_the_next_start(app_db: AppDb) -> None:
    name = f"pt_{id(app_db)}"
    async with alert_app(app_db, db_name=name) as h:
        code = (await start(h, step_seconds=600, wait_seconds=1200))["code"]
        await until_async(lambda: has_step(h, code, "chat sent"), "the chat step")
    async with alert_app(app_db, db_name=name) as h:
        try:
            done = await progress(h, code)
            assert done["done"] and done["status"] == "resolved"
            assert lines(done)[-1] == "ended: not finished: Watchkeeper stopped during it"
            assert (await h.client.post("/api/page-test", headers=BEARER)).status == 202
        finally:
            await h.app.database.client.drop_database(name)
