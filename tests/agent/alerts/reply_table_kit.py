"""The reply table's world: four open alerts and a way to say what a reply must do.

Each case starts from the same state (``fresh_alerts``): #1 warning, #2 info, #11
warning and #12 critical, the last one paged by SMS too, all at 10:00 UTC (11:00 in
the owner's Europe/Berlin). Codes jump from 2 to 11 so one- and two-digit codes and
GoAlert's ``100aa`` (no #100) are all exercised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from storage.repos.sms_budget import BUDGET_DOC
from tests.fakes.alert_app import Harness

Channel = Literal["telegram", "sms"]
TITLES = {
    "1": "Disk almost full",
    "2": "Nightly backup late",
    "11": "Certificate expires",
    "12": "Pump failure",
}


@dataclass(frozen=True)
class Applied:
    """The directive was applied to alert ``code`` (history ``action`` [``detail``])."""

    action: str
    code: str
    detail: str | None = None


@dataclass(frozen=True)
class Asked:
    """A bulk directive answered with its one-line question; nothing changed yet."""

    question: str


@dataclass(frozen=True)
class Told:
    """Answered without the model and without changing any alert."""

    text: str


@dataclass(frozen=True)
class ToModel:
    """Went to the model with alert ``code`` attached (None: no alert), named or not."""

    code: str | None
    named: Literal["code", "reply"] | None = None
    also: str = ""


@dataclass(frozen=True)
class Silent:
    """No answer at all and no model call (carrier keywords on SMS)."""


Expected = Applied | Asked | Told | ToModel | Silent


@dataclass(frozen=True)
class Case:
    text: str
    expected: Expected
    channel: Channel = "telegram"
    reply_to: str | None = None
    """Telegram reply-to the message that carried this alert."""


def ack(code: str) -> Applied:
    return Applied("acknowledged", code)


def resolve(code: str) -> Applied:
    return Applied("resolved", code)


def snooze(code: str, detail: str) -> Applied:
    return Applied("snoozed", code, detail)


def escalate(code: str) -> Applied:
    return Applied("escalation requested", code)


ALL_FOUR = "(#1, #2, #11, #12)?"


async def fresh_alerts(h: Harness) -> None:
    db = h.app.database.db
    await db["alerts"].delete_many({})
    await db["outbox"].delete_many({})
    await db["settings"].delete_many({"_id": {"$in": ["alert_code", BUDGET_DOC]}})
    await db["settings"].delete_many({"_id": {"$regex": "^alert_bulk:"}})
    for code, severity in (("1", "warning"), ("2", "info"), ("11", "warning"), ("12", "critical")):
        if code == "11":
            await db["settings"].update_one(
                {"_id": "alert_code"}, {"$set": {"value": 10}}, upsert=True
            )
        alert = await h.router.raise_alert(severity=severity, title=TITLES[code])
        assert alert.code == code
    await h.settle()
    h.chat.sent.clear()
    h.twilio.sent.clear()
    h.model.requests.clear()


async def telegram_id_of(h: Harness, code: str) -> str:
    doc = await h.app.database.db["outbox"].find_one(
        {"idempotency_key": f"alert:{code}:0:telegram"}
    )
    assert doc is not None
    return str(doc["external_ids"][0])


async def owner_changes(h: Harness, channel: str) -> list[tuple[str, str, Any]]:
    """(code, action, detail) of every history entry the owner's reply made."""
    found = []
    async for alert in h.app.database.db["alerts"].find({}):
        for item in alert["history"]:
            if item["by"] == f"owner via {channel}":
                found.append((alert["code"], item["action"], item.get("detail")))
    return found


async def play(h: Harness, case: Case) -> None:
    """Send the reply, then check it did exactly what the case says."""
    await fresh_alerts(h)
    if case.channel == "sms":
        assert (await h.sms_in(case.text)).status == 200
        replies = h.sms
    else:
        reply_to = await telegram_id_of(h, case.reply_to) if case.reply_to else None
        await h.chat.say(case.text, reply_to=reply_to)
        await h.settle()
        replies = h.chat.texts()
    changes = await owner_changes(h, case.channel)
    expected = case.expected
    if isinstance(expected, Applied):
        assert changes == [(expected.code, expected.action, expected.detail)]
        assert h.model.requests == []
        assert replies and replies[-1].startswith(f"#{expected.code} ")
        return
    assert changes == []
    if isinstance(expected, Silent):
        assert replies == [] and h.model.requests == []
    elif isinstance(expected, Asked | Told):
        want = expected.question if isinstance(expected, Asked) else expected.text
        assert h.model.requests == [] and len(replies) == 1
        assert replies[0].startswith(want), replies[0]
    else:
        assert len(h.model.requests) == 1 and replies == ["agent answer"]
        system = h.model.requests[0].read
        if expected.code is None:
            assert "## The alert" not in system
            return
        assert f"## The alert this message is about\n#{expected.code} [" in system
        marker = {
            None: "The owner did not name the alert",
            "code": f"The owner named alert #{expected.code} in the message",
            "reply": f"The owner replied to the message that carried #{expected.code}",
        }[expected.named]
        assert marker in system
        assert (f"also names {expected.also}" in system) == bool(expected.also)
