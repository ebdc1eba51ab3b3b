"""Twilio signatures over webhook URLs with encoded queries and paths (issue #13).

Twilio signs the URL exactly as it is configured, percent-encoding included. The
official ``twilio`` ``RequestValidator`` signs here, the request reaches the app with
that raw target (as a reverse proxy forwards it), and the app must accept it both
directly and behind a proxy (``PUBLIC_BASE_URL`` with a path prefix too); a URL the
proxy decoded or re-encoded on the way must not pass. ``PUBLIC_BASE_URL`` is needed
either way: the Host header is never trusted (issue #11).
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from twilio.request_validator import RequestValidator
from yarl import URL

from channels.sms import _raw_target
from tests.databases import AppDb
from tests.fakes.alert_app import FROM_NUMBER, Harness, alert_app

STRANGER = "+15550123456"  # recorded only: no model call, no reply
PATHS = ("/webhooks/twilio/sms", "/webhooks/twilio/s%6Ds")
QUERIES = (
    "",
    "?token=abc123",
    "?next=%2Fhome",
    "?q=a%20b",
    "?q=a+b",
    "?name=Jo%C3%A3o",
    "?name=jo%c3%a3o",
    "?t=%7Eme",
    "?t=~me",
    "?a=%26&b=1",
    "?p=100%25",
    "?k=%3D%3D",
    "?flag",
    "?a=1&a=2",
    "?s=Jo%C3%A3o+Silva&r=%2Fv%3Fx",
)
PUBLIC = "https://wk.example.com"
_sids = itertools.count(1)


async def _post(h: Harness, target: str, signed_url: str) -> int:
    """POST to our server at ``target`` (sent verbatim) with a signature of ``signed_url``."""
    form = {
        "MessageSid": f"SMsig{next(_sids):06d}",
        "From": STRANGER,
        "To": FROM_NUMBER,
        "Body": "hi",
    }
    signature = RequestValidator(h.twilio.auth_token).compute_signature(signed_url, form)
    local = str(h.client.make_url("/")).rstrip("/")
    resp = await h.client.session.post(
        URL(local + target, encoded=True), data=form, headers={"X-Twilio-Signature": signature}
    )
    return resp.status


def _decoded(url: str) -> str:
    parts = urlsplit(url)
    query = f"?{unquote(parts.query)}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{unquote(parts.path)}{query}"


TARGETS = [path + query for path in PATHS for query in QUERIES]


async def test_signature_over_the_raw_url_without_a_proxy(app_db: AppDb) -> None:
    """Twilio calls this server directly: ``PUBLIC_BASE_URL`` is its own public address
    (the Host header, the sender's to choose, no longer stands in for it, issue #11)."""
    direct = "http://203.0.113.7:8080"
    async with alert_app(app_db, public_base_url=direct) as h:
        local = str(h.client.make_url("/")).rstrip("/")
        refused: list[Any] = []
        for target in TARGETS:
            if await _post(h, target, direct + target) != 200:
                refused.append(target)
        assert refused == []
        # What the old code checked without PUBLIC_BASE_URL, the URL the Host header
        # names, passes no more.
        passed = [t for t in TARGETS if await _post(h, t, local + t) != 403]
        assert passed == []


@pytest.mark.parametrize("prefix", ["", "/hooks", "/my%20bot"])
async def test_signature_over_the_raw_url_behind_a_proxy(app_db: AppDb, prefix: str) -> None:
    """The proxy serves ``PUBLIC_BASE_URL`` (maybe under a prefix it strips) and passes
    the rest of the target on untouched."""
    public = PUBLIC + prefix
    async with alert_app(app_db, public_base_url=public + "/") as h:
        refused: list[Any] = []
        for target in TARGETS:
            if await _post(h, target, public + target) != 200:
                refused.append(target)
        assert refused == []
        # What the old code checked, the decoded URL, must not pass where it differs.
        encoded = [t for t in TARGETS if _decoded(public + t) != public + t]
        assert len(encoded) >= 20
        passed = [t for t in encoded if await _post(h, t, _decoded(public + t)) != 403]
        assert passed == []
        stored = await h.app.database.db["inbox"].count_documents({"channel": "sms"})
        assert stored == len(TARGETS)


def test_absolute_form_targets_are_cut_to_path_and_query() -> None:
    assert _raw_target("/webhooks/twilio/sms?a=%2F") == "/webhooks/twilio/sms?a=%2F"
    assert _raw_target("http://10.0.0.1:8080/webhooks/twilio/sms?a=%2F") == (
        "/webhooks/twilio/sms?a=%2F"
    )
    assert _raw_target("http://10.0.0.1:8080") == "/"
