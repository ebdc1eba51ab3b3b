"""Helpers for test page tests: start one over the API, read its progress, answer
Twilio's callbacks signed as Twilio signs them."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

from twilio.request_validator import RequestValidator

from tests.fakes.alert_app import ADMIN, FROM_NUMBER, OWNER_PHONE, PUBLIC_URL, Harness
from tests.waiting import until_async

BEARER = {"Authorization": f"Bearer {ADMIN}"}


async def start(h: Harness, **times: float) -> dict[str, Any]:
    resp = await h.client.post("/api/page-test", json=times, headers=BEARER)
    assert resp.status == 202, await resp.text()
    data: dict[str, Any] = await resp.json()
    return data


async def progress(h: Harness, code: str) -> dict[str, Any]:
    resp = await h.client.get(f"/api/page-test/{code}", headers=BEARER)
    assert resp.status == 200, await resp.text()
    data: dict[str, Any] = await resp.json()
    return data


async def finished(h: Harness, code: str) -> dict[str, Any]:
    """The progress once the test page has ended."""
    done: dict[str, Any] = {}

    async def ended() -> bool:
        done.update(await progress(h, code))
        return bool(done["done"])

    await until_async(ended, "the test page ended")
    return done


def lines(data: dict[str, Any]) -> list[str]:
    return [step["line"] for step in data["steps"]]


async def signed_post(h: Harness, url: str, form: dict[str, str]) -> int:
    """POST ``form`` to the absolute callback ``url`` Twilio was given, signed."""
    assert url.startswith(PUBLIC_URL), url
    signature = RequestValidator(h.twilio.auth_token).compute_signature(url, form)
    resp = await h.client.post(
        url.removeprefix(PUBLIC_URL), data=form, headers={"X-Twilio-Signature": signature}
    )
    await h.settle()
    return resp.status


async def press(h: Harness, digit: str) -> int:
    call = h.twilio.calls[-1]
    gather = ElementTree.fromstring(call.twiml).find("Gather")
    assert gather is not None, call.twiml
    form = {
        "CallSid": call.sid,
        "AccountSid": h.twilio.account_sid,
        "From": FROM_NUMBER,
        "To": OWNER_PHONE,
        "Digits": digit,
        "CallStatus": "in-progress",
    }
    return await signed_post(h, gather.attrib["action"], form)


async def has_step(h: Harness, code: str, action: str) -> bool:
    return action in [s["action"] for s in (await progress(h, code))["steps"]]
