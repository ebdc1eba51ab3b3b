"""Phone calls for critical alerts (issue 30, item 2), end to end.

A fake Twilio Calls API records each call and its TwiML; key presses and call statuses
come back to ``POST /webhooks/twilio/voice`` signed the way Twilio signs them, at the
absolute ``<Gather>`` action the call carried. The clock is the test's: escalation
steps and calls run through ``router.tick()``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import pytest
from twilio.request_validator import RequestValidator

from agent.alerts.calls import calls_off_reason
from agent.app.status import status_data, status_text
from agent.cli.doctor import check_calls
from channels.types import VOICE_CALL, OutboundMessage, SendError
from tests.agent.alerts.alert_kit import _alert
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.alert_app import (
    FROM_NUMBER,
    OWNER_PHONE,
    PUBLIC_URL,
    START,
    Harness,
    alert_app,
)
from tests.fakes.clock import FakeClock
from tests.fakes.twilio_api import FakeTwilio, twilio_error
from tests.waiting import until


def _gather(twiml: str) -> ElementTree.Element:
    gather = ElementTree.fromstring(twiml).find("Gather")
    assert gather is not None, twiml
    return gather


def _spoken(twiml: str) -> str:
    return " ".join(say.text or "" for say in ElementTree.fromstring(twiml).iter("Say"))


async def _post(h: Harness, url: str, form: dict[str, str], *, sign_url: str | None = None) -> Any:
    """POST ``form`` to the absolute ``url`` Twilio was given, signed as Twilio signs
    (over ``sign_url`` when a test wants it signed wrong)."""
    assert url.startswith(PUBLIC_URL + "/webhooks/twilio/voice?"), url
    path = url.removeprefix(PUBLIC_URL)
    signature = RequestValidator(h.twilio.auth_token).compute_signature(sign_url or url, form)
    return await h.client.post(path, data=form, headers={"X-Twilio-Signature": signature})


async def _press(
    h: Harness, digit: str, *, call: int = -1, call_sid: str | None = None, **sign: Any
) -> tuple[int, str]:
    """Press ``digit`` on a call the fake recorded; the response's status and TwiML."""
    placed = h.twilio.calls[call]
    form = {
        "CallSid": call_sid or placed.sid,
        "AccountSid": h.twilio.account_sid,
        "From": FROM_NUMBER,
        "To": OWNER_PHONE,
        "Digits": digit,
        "CallStatus": "in-progress",
    }
    resp = await _post(h, _gather(placed.twiml).attrib["action"], form, **sign)
    text = await resp.text()
    await h.settle()
    return resp.status, text


async def _call_status(h: Harness, status: str, *, call: int = -1) -> int:
    placed = h.twilio.calls[call]
    form = {"CallSid": placed.sid, "AccountSid": h.twilio.account_sid, "CallStatus": status}
    resp = await _post(h, placed.status_callback, form)
    return resp.status


def _actions(doc: dict[str, Any]) -> list[str]:
    return [e["action"] for e in doc["history"]]


async def test_a_call_rings_after_the_wait_and_not_before(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="critical", title="NAS disk full")
        code = alert.code
        assert len(h.twilio.sent) == 1 and h.twilio.calls == []
        await h.tick(minutes=4, seconds=59)
        assert h.twilio.calls == []
        await h.tick(seconds=1)
        assert len(h.twilio.calls) == 1
        call = h.twilio.calls[0]
        assert call.to == OWNER_PHONE and call.sender == FROM_NUMBER
        said = _spoken(call.twiml)
        assert f"Critical alert {code}: NAS disk full." in said and "Press 4 to acknowledge" in said
        gather = _gather(call.twiml)
        assert gather.attrib["numDigits"] == "1"
        action = urlsplit(gather.attrib["action"])
        assert f"{action.scheme}://{action.netloc}" == PUBLIC_URL
        assert parse_qs(action.query)["alert"] == [code]
        assert parse_qs(urlsplit(call.status_callback).query) == {
            "alert": [code],
            "event": ["status"],
        }
        assert "called" in _actions(await _alert(h.app, code))
        await h.tick(minutes=9)
        assert len(h.twilio.calls) == 1  # the next call comes with the next SMS page
        await h.tick(minutes=1)
        assert len(h.twilio.sent) == 2 and len(h.twilio.calls) == 2


async def test_an_alert_acknowledged_before_the_wait_never_rings(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="critical", title="NAS disk full")
        await h.tick(minutes=2)
        await h.chat.say(f"#{alert.code} ack")
        await h.settle()
        for _ in range(4):
            await h.tick(minutes=15)
        assert h.twilio.calls == [] and len(h.twilio.sent) == 1
        assert (await _alert(h.app, alert.code)).get("call_at") is None


async def test_zero_wait_calls_with_the_first_sms(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        await h.router.raise_alert(severity="critical", title="UPS on battery")
        assert len(h.twilio.sent) == 1 and len(h.twilio.calls) == 1


async def test_warnings_never_ring(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.tick(minutes=45)
        assert len(h.twilio.sent) == 1 and h.twilio.calls == []


async def test_key_4_acknowledges_and_the_chat_is_told(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        code = alert.code
        status, twiml = await _press(h, "4")
        assert status == 200
        assert _spoken(twiml) == f"Alert {code} acknowledged, escalation stopped. Goodbye."
        doc = await _alert(h.app, code)
        assert doc["status"] == "acknowledged" and doc["acknowledged_by"] == "owner via call"
        assert h.chat.texts()[-1] == f"By phone: #{code} acknowledged, escalation stopped."
        await h.tick(minutes=60)
        assert len(h.twilio.calls) == 1 and len(h.twilio.sent) == 1  # escalation stopped


async def test_key_6_resolves(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        status, twiml = await _press(h, "6")
        assert status == 200 and _spoken(twiml) == f"Alert {alert.code} resolved. Goodbye."
        assert (await _alert(h.app, alert.code))["status"] == "resolved"
        assert h.chat.texts()[-1] == f"By phone: #{alert.code} resolved."


async def test_key_1_repeats_and_other_keys_do_nothing(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        status, twiml = await _press(h, "1")
        assert status == 200 and "Freezer warm" in _spoken(_tostring(_gather(twiml)))
        status, twiml = await _press(h, "9")
        assert status == 200 and _spoken(twiml).startswith("That key does nothing.")
        doc = await _alert(h.app, alert.code)
        assert doc["status"] == "open" and len(h.chat.sent) == 1  # only the alert itself


def _tostring(element: ElementTree.Element) -> str:
    return ElementTree.tostring(element, encoding="unicode")


async def test_a_wrongly_signed_key_press_is_refused_and_nothing_applied(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        no_query = f"{PUBLIC_URL}/webhooks/twilio/voice"  # the query is signed too
        status, _ = await _press(h, "4", sign_url=no_query)
        assert status == 403
        resp = await h.client.post(
            f"/webhooks/twilio/voice?alert={alert.code}&event=key",
            data={"CallSid": "CA1", "Digits": "4"},
        )
        assert resp.status == 403  # unsigned
        doc = await _alert(h.app, alert.code)
        assert doc["status"] == "open" and "key pressed" not in _actions(doc)
        assert len(h.chat.sent) == 1


async def test_a_replayed_key_press_is_answered_but_applied_once(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        code = alert.code
        await _press(h, "4")
        await h.router.escalate(code, "owner")  # open again, paging again
        status, twiml = await _press(h, "4")  # Twilio retries the same request
        assert status == 200 and _spoken(twiml) == f"Alert {code} is open. Goodbye."
        doc = await _alert(h.app, code)
        assert doc["status"] == "open"
        assert _actions(doc).count("acknowledged") == 1 and _actions(doc).count("key pressed") == 1
        confirmations = [t for t in h.chat.texts() if t.startswith("By phone")]
        assert len(confirmations) == 1


async def test_a_key_press_for_an_unknown_alert_says_so(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        await h.router.raise_alert(severity="critical", title="Freezer warm")
        url = f"{PUBLIC_URL}/webhooks/twilio/voice?alert=99&event=key"
        resp = await _post(h, url, {"CallSid": "CA9", "Digits": "4"})
        assert resp.status == 200
        assert _spoken(await resp.text()) == "Watchkeeper has no alert 99. Goodbye."


async def test_no_answer_is_recorded_in_the_history_once(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        assert await _call_status(h, "no-answer") == 200
        assert await _call_status(h, "no-answer") == 200  # a retried callback
        doc = await _alert(h.app, alert.code)
        assert _actions(doc).count("call no-answer") == 1
        assert doc["status"] == "open"
        await h.tick(minutes=15)  # no answer: the escalation carries on, and rings again
        assert len(h.twilio.calls) == 2 and len(h.twilio.sent) == 2


async def test_at_most_three_calls_an_hour(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        for _ in range(3):
            await h.tick(minutes=15)
        assert len(h.twilio.sent) == 4 and len(h.twilio.calls) == 3
        doc = await _alert(h.app, alert.code)
        skipped = [e for e in doc["history"] if e["action"] == "call skipped"]
        assert [e["detail"] for e in skipped] == ["3 calls in the last hour already"]
        other = await h.router.raise_alert(severity="critical", title="Second problem")
        assert len(h.twilio.calls) == 3  # per phone, not per alert
        assert "call skipped" in _actions(await _alert(h.app, other.code))


async def test_voice_calls_off_means_no_calls(app_db: AppDb) -> None:
    async with alert_app(app_db, twilio_voice_calls="off") as h:
        await h.router.raise_alert(severity="critical", title="Freezer warm")
        for _ in range(4):
            await h.tick(minutes=15)
        assert h.twilio.calls == [] and len(h.twilio.sent) == 4
        assert h.router.calls.status().to_json() == {
            "on": False,
            "off_because": "TWILIO_VOICE_CALLS=off",
        }
        text = status_text(await status_data(h.app), "m", tz=h.app.deps.owner.tz, now=h.clock.now)
        assert "Calls: off (TWILIO_VOICE_CALLS=off)" in text


async def test_calls_say_on_in_status_and_doctor(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        assert "Calls: on, after 5 min" in status_text(
            await status_data(h.app), "m", tz=h.app.deps.owner.tz, now=h.clock.now
        )
    good = make_settings(
        twilio_account_sid="AC1",
        twilio_auth_token="t",
        twilio_from_number=FROM_NUMBER,
        owner_phone=OWNER_PHONE,
        public_base_url=PUBLIC_URL,
    )
    assert calls_off_reason(good) is None
    assert check_calls(good).ok
    cases = {
        "twilio_voice_calls": ("off", "TWILIO_VOICE_CALLS=off"),
        "owner_phone": (None, "OWNER_PHONE is not set"),
        "public_base_url": (None, "PUBLIC_BASE_URL is not set"),
        "twilio_from_number": (None, "Twilio is not set up"),
    }
    for name, (value, why) in cases.items():
        settings = good.model_copy(update={name: value})
        reason = calls_off_reason(settings)
        assert reason is not None and reason.startswith(why), name
        check = check_calls(settings)
        assert not check.ok and check.detail.startswith(f"off: {why}")


async def test_a_refused_call_is_recorded_and_sms_goes_on(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        h.twilio.push_call(twilio_error(400, 21215, "Geo permission not enabled"))
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        assert h.twilio.call_attempts == 1 and h.twilio.calls == []
        doc = await _alert(h.app, alert.code)
        failed = [e for e in doc["history"] if e["action"] == "call failed"]
        assert len(failed) == 1 and "Geo permission not enabled" in failed[0]["detail"]
        await h.tick(minutes=15)
        assert len(h.twilio.sent) == 2 and len(h.twilio.calls) == 1


async def test_a_call_twilio_cannot_place_now_is_retried(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        h.twilio.push_call(twilio_error(503, 20500, "Service unavailable"))
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        doc = await _alert(h.app, alert.code)
        failed = [e["detail"] for e in doc["history"] if e["action"] == "call failed"]
        assert len(failed) == 1 and failed[0].endswith("retrying")
        h.clock.advance(seconds=5)
        await h.app.outbox.run_due()
        await until(lambda: len(h.twilio.calls) == 1, "the call retried")


async def test_a_restart_never_rings_twice_for_one_step(app_db: AppDb, tmp_path: Any) -> None:
    name = f"calls_{tmp_path.name[-8:]}"
    clock = FakeClock(START)
    async with FakeTwilio() as twilio:
        async with alert_app(app_db, db_name=name, clock=clock, twilio=twilio) as first:
            alert = await first.router.raise_alert(severity="critical", title="UPS on battery")
            code = alert.code
            await first.tick(minutes=5)
            assert len(twilio.calls) == 1
            # What a crash after the call was stored, before the alert recorded it,
            # leaves: the call's lease still on the alert, its count not moved on.
            lease = clock() + timedelta(minutes=2)
            await first.app.database.db["alerts"].update_one(
                {"code": code},
                {
                    "$set": {"call_at": lease, "calls": 0},
                    "$pull": {"history": {"action": "called"}},
                },
            )
        async with alert_app(app_db, db_name=name, clock=clock, twilio=twilio) as second:
            await second.tick(minutes=2)  # the lease runs out: the step runs again
            assert len(twilio.calls) == 1
            doc = await _alert(second.app, code)
            assert doc["calls"] == 1 and doc.get("call_at") is None
            assert _actions(doc).count("called") == 1
            await second.tick(minutes=8)  # the next page, and its call, as planned
            assert len(twilio.calls) == 2 and len(twilio.sent) == 2
            await second.app.database.client.drop_database(name)


async def test_odd_voice_webhooks_get_clear_answers(app_db: AppDb) -> None:
    async with alert_app(app_db, alert_call_after_minutes=0) as h:
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        url = f"{PUBLIC_URL}/webhooks/twilio/voice?event=key"
        resp = await _post(h, url, {"CallSid": "CA9", "Digits": "4"})
        assert _spoken(await resp.text()) == "This call names no alert. Goodbye."
        assert await _call_status(h, "sideways") == 200  # not a call state: not recorded
        status, twiml = await _press(h, "")  # the caller pressed nothing in time
        assert status == 200 and _spoken(twiml).startswith("That key does nothing.")
        doc = await _alert(h.app, alert.code)
        assert doc["status"] == "open" and "call sideways" not in _actions(doc)
        resp = await h.client.post(
            "/webhooks/twilio/voice?alert=1&event=key",
            data=b"{}",
            headers={"Content-Type": "application/json", "X-Twilio-Signature": "x"},
        )
        assert resp.status == 415


async def test_a_call_retried_too_late_is_dropped(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        sms = h.app.channels["sms"]
        late = (h.clock() - timedelta(seconds=1)).isoformat()
        message = OutboundMessage(
            "sms", OWNER_PHONE, "<Response/>", "k", meta={VOICE_CALL: {"ring_until": late}}
        )
        with pytest.raises(SendError, match="too late") as caught:
            await sms.send(message)
        assert not caught.value.retryable and h.twilio.call_attempts == 0
        on_time = OutboundMessage("sms", OWNER_PHONE, "<Response/>", "k2", meta={VOICE_CALL: {}})
        result = await sms.send(on_time)
        assert result.external_ids == (h.twilio.calls[0].sid,)
        assert h.twilio.sent == []  # a call, not a message (and not in the SMS budget)
