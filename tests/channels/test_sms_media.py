"""Twilio MMS images: ``MediaUrl0`` in the signed webhook, fetched with the account's
credentials from the fake Twilio through the whole app (``build_app`` wiring), stored in
GridFS and referenced from the inbox row; other hosts and strangers get nothing."""

from __future__ import annotations

import os
import uuid

from twilio.request_validator import RequestValidator

from tests.channels.media_kit import gridfs_files, media_of, stored_bytes
from tests.databases import AppDb
from tests.fakes.alert_app import FROM_NUMBER, OWNER_PHONE, PUBLIC_URL, Harness, alert_app
from tests.fakes.twilio_api import FakeTwilio

STRANGER = "+15550123456"


async def _mms(
    h: Harness, body: str, media: list[tuple[str, str]], sender: str = OWNER_PHONE
) -> str:
    """Post a signed MMS webhook as Twilio does; returns its MessageSid."""
    sid = f"MM{uuid.uuid4().hex}"
    form = {"MessageSid": sid, "AccountSid": h.twilio.account_sid, "From": sender,
            "To": FROM_NUMBER, "Body": body, "NumMedia": str(len(media))}  # fmt: skip
    for i, (url, mime) in enumerate(media):
        form[f"MediaUrl{i}"], form[f"MediaContentType{i}"] = url, mime
    url = f"{PUBLIC_URL}/webhooks/twilio/sms"
    signature = RequestValidator(h.twilio.auth_token).compute_signature(url, form)
    resp = await h.client.post(
        "/webhooks/twilio/sms", data=form, headers={"X-Twilio-Signature": signature}
    )
    assert resp.status == 200
    await h.settle()
    return sid


def _seen(h: Harness) -> list[str | None]:
    return [r.messages[-1].text for r in h.model.requests]


async def test_mms_image_is_fetched_with_credentials_and_stored(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        jpeg, png = os.urandom(40_000), os.urandom(1_000)
        urls = [
            (h.twilio.add_media(jpeg, "image/jpeg"), "image/jpeg"),
            (h.twilio.add_media(b"BEGIN:VCARD", "text/vcard"), "text/vcard"),
            (h.twilio.add_media(png, "image/png"), "image/png"),
        ]
        sid = await _mms(h, "look at this", urls)
        db = h.app.database.db
        first, second = await media_of(db, external_id=sid)  # the vCard is no image
        assert await stored_bytes(db, first) == jpeg and first["mime"] == "image/jpeg"
        assert await stored_bytes(db, second) == png and second["mime"] == "image/png"
        media_hits = [(p, auth) for p, auth in h.twilio.media_requests if "/Media/" in p]
        assert len(media_hits) == 2 and all(auth for _p, auth in media_hits)
        assert _seen(h) == ["[MMS with 3 attachments] look at this"]
        assert h.sms == ["agent answer"]


async def test_media_url_on_another_host_is_refused(app_db: AppDb) -> None:
    async with FakeTwilio() as elsewhere, alert_app(app_db) as h:
        foreign = elsewhere.add_media(os.urandom(500), "image/jpeg")
        sid = await _mms(h, "", [(foreign, "image/jpeg")])
        [item] = await media_of(h.app.database.db, external_id=sid)
        assert item["status"] == "refused" and "source" not in item
        assert elsewhere.media_requests == [] and h.twilio.media_requests == []
        assert await gridfs_files(h.app.database.db) == 0
        assert _seen(h) == [
            "[MMS with 1 attachment]\n[photo: not downloaded (its address is not on the "
            "Twilio API host)]"
        ]


async def test_redirect_to_plain_http_elsewhere_is_not_followed(app_db: AppDb) -> None:
    async with FakeTwilio() as cdn, alert_app(app_db) as h:
        h.twilio.cdn_base = cdn.url  # http, another port: neither https nor the API's origin
        url = h.twilio.add_media(os.urandom(500), "image/jpeg")
        sid = await _mms(h, "hi", [(url, "image/jpeg")])
        [item] = await media_of(h.app.database.db, external_id=sid)
        assert item["status"] == "refused"
        assert len(h.twilio.media_requests) == 1 and cdn.media_requests == []


async def test_image_over_the_cap_is_not_kept(app_db: AppDb) -> None:
    async with alert_app(app_db, media_max_bytes=10_000) as h:
        url = h.twilio.add_media(os.urandom(50_000), "image/jpeg")
        sid = await _mms(h, "big one", [(url, "image/jpeg")])
        [item] = await media_of(h.app.database.db, external_id=sid)
        assert item["status"] == "too_large"
        assert await gridfs_files(h.app.database.db) == 0
        assert _seen(h)[0].endswith("[photo: too large to look at; limit 10 kB]")  # type: ignore[union-attr]


async def test_stranger_mms_is_never_fetched(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        url = h.twilio.add_media(os.urandom(500), "image/jpeg")
        sid = await _mms(h, "hello", [(url, "image/jpeg")], sender=STRANGER)
        assert h.twilio.media_requests == [] and h.model.requests == []
        assert await media_of(h.app.database.db, external_id=sid) == []
        assert await gridfs_files(h.app.database.db) == 0
