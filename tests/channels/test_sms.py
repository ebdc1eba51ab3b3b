"""The Twilio SMS channel: outbound through the SDK to a fake API, the signed webhook."""

from __future__ import annotations

import pytest
from twilio.request_validator import RequestValidator

from channels.sms import EMPTY_TWIML, MAX_BODY, SmsChannel, count_segments, fit_body
from channels.types import InboundMessage, OutboundMessage, SendError
from tests.databases import AppDb
from tests.fakes.alert_app import FROM_NUMBER, OWNER_PHONE, PUBLIC_URL, alert_app
from tests.fakes.twilio_api import FakeTwilio, twilio_error

STRANGER = "+15550123456"


def _out(text: str, key: str = "k1", to: str = OWNER_PHONE) -> OutboundMessage:
    return OutboundMessage("sms", to, text, key)


async def _channel(fake: FakeTwilio, **kwargs: object) -> SmsChannel:
    channel = SmsChannel(
        fake.account_sid,
        fake.auth_token,
        FROM_NUMBER,
        api_base_url=fake.url,
        **kwargs,  # type: ignore[arg-type]
    )

    async def sink(_message: InboundMessage) -> bool:
        return True

    await channel.start(sink)
    return channel


# -- pure helpers ------------------------------------------------------------------------


def test_segments_follow_the_encoding() -> None:
    assert count_segments("a" * 160) == count_segments("a" * 160)
    assert (count_segments("a" * 160).encoding, count_segments("a" * 160).count) == ("GSM-7", 1)
    assert count_segments("a" * 161).count == 2
    assert count_segments("a" * 306).count == 2 and count_segments("a" * 307).count == 3
    assert count_segments("{}" * 80).units == 320  # extension characters take two septets
    ucs = count_segments("ok ✅")
    assert ucs.encoding == "UCS-2" and ucs.count == 1
    assert count_segments("é" * 70).encoding == "GSM-7"  # é is in the GSM alphabet
    assert count_segments("ł" * 71).count == 2 and count_segments("ł" * 134).count == 2
    assert count_segments("😀" * 35).units == 70  # surrogate pairs count twice


def test_long_bodies_are_cut_with_a_visible_note() -> None:
    text, cut = fit_body("x" * 5000)
    assert cut and len(text) == MAX_BODY and text.endswith("[cut: 3428 more characters]")
    assert text.count("x") + 3428 == 5000
    assert fit_body("short") == ("short", False)


# -- outbound -------------------------------------------------------------------------------


async def test_send_posts_the_form_to_the_configured_base_url() -> None:
    async with FakeTwilio() as fake:
        channel = await _channel(fake)
        try:
            result = await channel.send(_out("Disk full ✅"))
        finally:
            await channel.stop()
        assert len(fake.sent) == 1
        sent = fake.sent[0]
        assert (sent.account, sent.to, sent.sender, sent.body) == (
            fake.account_sid,
            OWNER_PHONE,
            FROM_NUMBER,
            "Disk full ✅",
        )
        assert result.external_ids[0].startswith("SM")
        assert result.info == {
            "segments": 1,
            "encoding": "UCS-2",
            "truncated": False,
            "twilio_status": "queued",
        }


async def test_send_cuts_over_1600_characters() -> None:
    async with FakeTwilio() as fake:
        channel = await _channel(fake)
        try:
            result = await channel.send(_out("word " * 1000))
        finally:
            await channel.stop()
        assert len(fake.sent[0].body) == 1600 and "[cut:" in fake.sent[0].body
        assert result.info["truncated"] is True and result.info["segments"] == 11


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (429, 20429, True),
        (500, 20500, True),
        (503, 20503, True),
        (400, 21211, False),
        (400, 21610, False),
        (401, 20003, False),
    ],
)
async def test_errors_say_whether_a_retry_can_help(status: int, code: int, retryable: bool) -> None:
    async with FakeTwilio() as fake:
        channel = await _channel(fake)
        fake.push(twilio_error(status, code, "scripted"))
        try:
            with pytest.raises(SendError) as info:
                await channel.send(_out("hi"))
        finally:
            await channel.stop()
        assert info.value.retryable is retryable
        assert str(code) in str(info.value) and fake.auth_token not in str(info.value)


async def test_network_errors_are_retryable() -> None:
    async with FakeTwilio() as fake:
        url = fake.url
    channel = SmsChannel("AC" + "1" * 32, "tok", FROM_NUMBER, api_base_url=url, timeout=2)

    async def sink(_message: InboundMessage) -> bool:
        return True

    await channel.start(sink)
    try:
        with pytest.raises(SendError) as info:
            await channel.send(_out("hi"))
    finally:
        await channel.stop()
    assert info.value.retryable is True


async def test_outbox_records_segments_and_retries_a_5xx(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        h.twilio.push(twilio_error(500, 20500, "try later"))
        await h.app.outbox.enqueue(_out("hello there", key="retry-me"))
        doc = await h.app.database.db["outbox"].find_one({"idempotency_key": "retry-me"})
        assert doc is not None and doc["status"] == "pending" and "500" in doc["last_error"]
        h.clock.advance(seconds=2)
        await h.app.outbox.run_due()
        doc = await h.app.database.db["outbox"].find_one({"idempotency_key": "retry-me"})
        assert doc is not None and doc["status"] == "sent"
        assert doc["info"]["segments"] == 1 and doc["info"]["encoding"] == "GSM-7"
        assert h.sms == ["hello there"]


# -- inbound webhook ---------------------------------------------------------------------------


async def test_owner_sms_reaches_the_agent_and_the_answer_goes_back(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        resp = await h.sms_in("what's on today?")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/xml")
        assert await resp.text() == EMPTY_TWIML
        assert len(h.model.requests) == 1 and h.sms == ["agent answer"]
        assert h.twilio.sent[0].to == OWNER_PHONE


async def test_bad_or_missing_signature_is_refused_and_not_stored(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        unsigned = await h.sms_in("hello", sign=False)
        assert unsigned.status == 403
        url = PUBLIC_URL + "/webhooks/twilio/sms"
        form = {"MessageSid": "SM1", "From": OWNER_PHONE, "Body": "hello"}
        forged = RequestValidator("wrong-token").compute_signature(url, form)
        resp = await h.client.post(
            "/webhooks/twilio/sms", data=form, headers={"X-Twilio-Signature": forged}
        )
        assert resp.status == 403
        good = RequestValidator(h.twilio.auth_token).compute_signature(url, form)
        tampered = await h.client.post(
            "/webhooks/twilio/sms",
            data=form | {"Body": "transfer money"},
            headers={"X-Twilio-Signature": good},
        )
        assert tampered.status == 403
        assert await h.app.database.db["inbox"].count_documents({}) == 0
        assert h.model.requests == [] and h.twilio.sent == []


async def test_duplicate_message_sid_is_processed_once(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        first = await h.sms_in("remind me at 5", sid="SMdup0001")
        again = await h.sms_in("remind me at 5", sid="SMdup0001")
        assert first.status == again.status == 200
        assert len(h.model.requests) == 1 and len(h.twilio.sent) == 1
        assert await h.app.database.db["inbox"].count_documents({"channel": "sms"}) == 1


async def test_unknown_number_is_recorded_without_model_or_reply(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        resp = await h.sms_in("hi, who is this?", sender=STRANGER)
        assert resp.status == 200
        assert h.model.requests == [] and h.twilio.sent == []
        inbox = await h.app.database.db["inbox"].find_one({"sender_id": STRANGER})
        assert inbox is not None and inbox["status"] == "done"
        stats = await h.app.database.db["settings"].find_one({"_id": f"stranger:sms:{STRANGER}"})
        assert stats is not None and stats["count"] == 1


async def test_signature_is_checked_against_the_public_url_behind_a_proxy(
    app_db: AppDb,
) -> None:
    public = "https://wk.example.com"
    async with alert_app(app_db, public_base_url=public + "/") as h:
        form = {"MessageSid": "SMp1", "From": OWNER_PHONE, "To": FROM_NUMBER, "Body": "hi"}
        local = str(h.client.make_url("/webhooks/twilio/sms"))
        for url, expected in ((local, 403), (public + "/webhooks/twilio/sms", 200)):
            signature = RequestValidator(h.twilio.auth_token).compute_signature(url, form)
            resp = await h.client.post(
                "/webhooks/twilio/sms", data=form, headers={"X-Twilio-Signature": signature}
            )
            assert resp.status == expected
        await h.settle()
        stored = await h.app.database.db["inbox"].find({"channel": "sms"}).to_list()
        assert [(d["external_id"], d["chat_id"], d["text"]) for d in stored] == [
            ("SMp1", OWNER_PHONE, "hi")
        ]
