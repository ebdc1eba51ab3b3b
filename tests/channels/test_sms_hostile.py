"""Hostile input on ``POST /webhooks/twilio/sms`` (issue #11, item 5).

The signed URL never comes from the request's Host header; an unsigned request is
refused before its body is read, whatever its type or size; a malformed webhook gets
a 4xx (never a 500); and nothing of a refused request is stored.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from twilio.request_validator import RequestValidator

from channels.types import OutboundMessage
from tests.databases import AppDb
from tests.fakes.alert_app import FROM_NUMBER, OWNER_PHONE, PUBLIC_URL, Harness, alert_app

PATH = "/webhooks/twilio/sms"
FORM_TYPE = "application/x-www-form-urlencoded"
_sids = itertools.count(1)


def _form(**fields: str) -> dict[str, str]:
    form = {
        "MessageSid": f"SMhostile{next(_sids):06d}",
        "From": OWNER_PHONE,
        "To": FROM_NUMBER,
        "Body": "hi",
        "NumMedia": "0",
    }
    form.update(fields)
    return form


def _sign(h: Harness, form: dict[str, str], url: str = PUBLIC_URL + PATH) -> str:
    return str(RequestValidator(h.twilio.auth_token).compute_signature(url, form))


async def _stored(h: Harness) -> int:
    return int(await h.app.database.db["inbox"].count_documents({}))


async def test_without_public_base_url_no_host_header_is_trusted(
    app_db: AppDb, caplog: pytest.LogCaptureFixture
) -> None:
    """Signed over the URL the Host header names (ours, or one an attacker picked to
    replay a signature made for another server): refused, with a log line that says
    what to set. Outbound SMS keeps working without it."""
    async with alert_app(app_db, public_base_url=None) as h:
        local = str(h.client.make_url(PATH))
        for url, host in ((local, None), ("https://other.example" + PATH, "other.example")):
            form = _form()
            headers = {"X-Twilio-Signature": _sign(h, form, url)}
            if host:
                headers["Host"] = host
            with caplog.at_level(logging.WARNING, logger="channels.sms"):
                resp = await h.client.post(PATH, data=form, headers=headers)
            assert resp.status == 403
        assert "set PUBLIC_BASE_URL" in caplog.text
        assert await _stored(h) == 0 and h.model.requests == []
        await h.app.outbox.enqueue(OutboundMessage("sms", OWNER_PHONE, "still sends", "k-out"))
        assert h.sms == ["still sends"]


async def test_a_spoofed_host_header_cannot_choose_the_signed_url(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        form = _form()
        url = "https://other.example" + PATH
        headers = {"X-Twilio-Signature": _sign(h, form, url), "Host": "other.example"}
        resp = await h.client.post(PATH, data=form, headers=headers)
        assert resp.status == 403
        ok = _form()
        resp = await h.client.post(PATH, data=ok, headers={"X-Twilio-Signature": _sign(h, ok)})
        assert resp.status == 200
        assert await _stored(h) == 1


def _multipart() -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field("MessageSid", "SMmulti")
    data.add_field("From", OWNER_PHONE)
    data.add_field("file", b"\x00\xff" * 1000, filename="x.bin")
    return data


UNSIGNED_BODIES: list[tuple[str, Any, dict[str, str]]] = [
    ("multipart", _multipart(), {}),
    ("broken multipart", b"--x\r\nnonsense", {"Content-Type": "multipart/form-data"}),
    (
        "json",
        b'{"MessageSid": "SM1", "From": "+15550100100"}',
        {"Content-Type": "application/json"},
    ),
    ("text", b"hello", {"Content-Type": "text/plain"}),
    ("no type", b"\xff\xfe\x00garbage", {"Content-Type": ""}),
    ("bad charset", b"MessageSid=SM1", {"Content-Type": f"{FORM_TYPE}; charset=nope-9"}),
    ("not utf-8", b"MessageSid=SM1&Body=\xff\xfe", {"Content-Type": FORM_TYPE}),
    ("huge", b"Body=" + b"x" * (3 * 1024 * 1024), {"Content-Type": FORM_TYPE}),
]


@pytest.mark.parametrize(
    ("body", "headers"),
    [(b, hd) for _, b, hd in UNSIGNED_BODIES],
    ids=[n for n, *_ in UNSIGNED_BODIES],
)
async def test_unsigned_bodies_of_any_type_are_refused_before_parsing(
    app_db: AppDb, body: Any, headers: dict[str, str]
) -> None:
    async with alert_app(app_db) as h:
        resp = await h.client.post(PATH, data=body, headers=headers)
        assert resp.status == 403
        assert await _stored(h) == 0 and h.model.requests == []


async def test_signed_but_malformed_webhooks_get_4xx_and_nothing_is_stored(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db) as h:
        sig = {"X-Twilio-Signature": _sign(h, _form())}
        cases: list[tuple[Any, dict[str, str], int]] = [
            (_multipart(), sig, 415),
            (b'{"Body": "hi"}', sig | {"Content-Type": "application/json"}, 415),
            (b"Body=hi", sig | {"Content-Type": f"{FORM_TYPE}; charset=nope-9"}, 415),
            (b"Body=hi&From=\xff\xfe", sig | {"Content-Type": FORM_TYPE}, 400),
            (b"&".join(b"k%d=v" % i for i in range(5000)), sig | {"Content-Type": FORM_TYPE}, 400),
            (b"Body=" + b"x" * (200 * 1024), sig | {"Content-Type": FORM_TYPE}, 413),
            (b"not gzip", sig | {"Content-Type": FORM_TYPE, "Content-Encoding": "gzip"}, 400),
        ]
        for body, headers, expected in cases:
            resp = await h.client.post(PATH, data=body, headers=headers)
            assert (resp.status, headers.get("Content-Type")) == (
                expected,
                headers.get("Content-Type"),
            )
        assert await _stored(h) == 0 and h.model.requests == []


async def test_an_oversize_chunked_body_gets_413(app_db: AppDb) -> None:
    """No Content-Length to check first: reading stops at the limit."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b"Body="
        for _ in range(64):
            yield b"x" * 8192

    async with alert_app(app_db) as h:
        headers = {"X-Twilio-Signature": _sign(h, _form()), "Content-Type": FORM_TYPE}
        resp = await h.client.post(PATH, data=chunks(), headers=headers)
        assert resp.status == 413
        assert await _stored(h) == 0


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"NumMedia": "9" * 50}, 400),
        ({"NumMedia": "1" + "0" * 5000}, 400),
        ({"NumMedia": "²"}, 400),  # str.isdigit says yes, int() says no
        ({"NumMedia": "-1"}, 400),
        ({"NumMedia": "1e3"}, 400),
        ({"NumMedia": "101"}, 400),
        ({"MessageSid": "SM" + "a" * 5000}, 400),
        ({"From": "+1" + "5" * 5000}, 400),
        ({"To": "x" * 5000}, 400),
        ({"NumMedia": "2"}, 200),
        ({"NumMedia": ""}, 200),
    ],
)
async def test_absurd_fields_in_a_signed_webhook_get_400(
    app_db: AppDb, fields: dict[str, str], expected: int
) -> None:
    async with alert_app(app_db) as h:
        form = _form(**fields)
        resp = await h.client.post(PATH, data=form, headers={"X-Twilio-Signature": _sign(h, form)})
        assert resp.status == expected
        assert await _stored(h) == (1 if expected == 200 else 0)


async def test_a_body_that_never_finishes_gets_408(app_db: AppDb) -> None:
    """Headers fast, then the body stalls: the handler stops waiting after the read timeout."""
    async with alert_app(app_db, http_read_timeout_seconds=0.5) as h:
        form = _form()
        body = urlencode(form).encode()
        host, port = h.client.host, h.client.port
        reader, writer = await asyncio.open_connection(host, port)
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: {FORM_TYPE}\r\nContent-Length: {len(body) + 10}\r\n"
            f"X-Twilio-Signature: {_sign(h, form)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        # The body never completes: only the server's read timeout can answer.
        answer = await asyncio.wait_for(reader.read(200), 30)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        writer.close()
        assert await _stored(h) == 0


async def test_a_flood_of_refusals_is_not_a_flood_of_log_lines(
    app_db: AppDb, caplog: pytest.LogCaptureFixture
) -> None:
    async with alert_app(app_db) as h:
        with caplog.at_level(logging.WARNING, logger="channels.sms"):
            for _ in range(30):
                assert (await h.client.post(PATH, data=_form())).status == 403
        lines = [r for r in caplog.records if r.name == "channels.sms"]
        assert len(lines) == 1 and "without a signature" in lines[0].getMessage()
        assert h.app.channels["sms"].status()["refused"] == 30
