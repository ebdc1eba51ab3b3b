"""An alert document that cannot be read (written by hand, by ``db_query``, by a bug) is
logged and skipped where alerts are read: the escalation loop, ``/alerts``,
``manage_alerts list``, ``GET /api/status`` and the dashboard carry on with the others.

Alerts stored by an older version (fields it never wrote) still load."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent.llm.types import ToolResultPart
from storage.repos.alert_record import Alert, AlertRecordError
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, START, Harness, alert_app
from tests.fakes.scripted import ScriptedModel, sequence

AUTH = {"Authorization": f"Bearer {ADMIN}"}
DAMAGED: list[dict[str, Any]] = [
    # Due first: no code, no severity, a timer long past.
    {"title": "half written", "status": "open", "next_action": "deliver"},
    # A severity no version ever wrote, and a creation time that is text.
    {"code": "90", "severity": "urgent", "title": "by hand", "status": "open"},
    {"code": "91", "severity": "info", "title": "text time", "status": "open"},
]


async def _damage(h: Harness) -> None:
    """Store the damaged documents beside whatever the router stored."""
    alerts = h.app.database.db["alerts"]
    due = h.clock() - timedelta(hours=1)
    await alerts.insert_one(DAMAGED[0] | {"next_escalation_at": due})
    await alerts.insert_one(DAMAGED[1] | {"created_at": h.clock(), "next_escalation_at": due})
    await alerts.insert_one(DAMAGED[2] | {"created_at": "yesterday"})


async def test_a_damaged_alert_does_not_stop_the_escalation_loop(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        raised = await h.router.raise_alert(severity="warning", title="Disk 91% full")
        await _damage(h)
        h.clock.advance(minutes=30)  # the warning's SMS is due, after the damaged timers
        assert await h.tick() >= 1
        assert any(f"#{raised.code}" in body for body in h.sms)
        doc = await _alert(h.app, raised.code)
        assert doc["sms_rounds"] == 1
        # The damaged ones were left as they were, leased for a later look.
        damaged = await h.app.database.db["alerts"].find_one({"title": "half written"})
        assert damaged is not None and damaged["next_escalation_at"] > h.clock()


async def test_lists_skip_a_damaged_alert(app_db: AppDb) -> None:
    model = ScriptedModel(lambda _r: "")
    model.responder = sequence(model.call("manage_alerts", action="list"), "Done.")
    async with alert_app(app_db, model=model) as h:
        await h.router.raise_alert(severity="warning", title="Fan noisy")
        await _damage(h)

        await h.chat.say("/alerts")
        await h.settle()
        text = h.chat.texts()[-1]
        assert "#1 WARNING Fan noisy - open, raised 0m ago" in text
        assert "by hand" not in text and "half written" not in text

        await h.chat.say("what is open?")
        await h.settle()
        [listed] = model.requests[-1].messages[-1].parts
        assert isinstance(listed, ToolResultPart)
        assert listed.result["count"] == 1 and listed.result["alerts"][0]["code"] == "1"

        status = await (await h.client.get("/api/status", headers=AUTH)).json()
        assert [a["code"] for a in status["alerts"]] == ["1"]

        page = await h.client.get("/alerts", headers=AUTH)
        assert page.status == 200
        html = await page.text()
        assert 'id="alert-1"' in html and "by hand" not in html


def test_an_alert_stored_by_an_older_version_loads() -> None:
    """Only what the first versions wrote: no seq, no counters, no history."""
    doc = {
        "_id": "x",
        "code": 3,
        "severity": "critical",
        "title": "Pump",
        "status": "snoozed",
        "created_at": START.replace(tzinfo=None),  # a client without tz_aware
        "snoozed_until": START + timedelta(hours=1),
    }
    alert = Alert.from_doc(doc)
    assert (alert.code, alert.count, alert.seq, alert.history) == ("3", 1, 0, ())
    assert alert.created_at == START and alert.until == START + timedelta(hours=1)


def test_a_damaged_field_is_named() -> None:
    with pytest.raises(AlertRecordError, match="severity is 'urgent'"):
        Alert.from_doc(DAMAGED[1] | {"created_at": START})
    with pytest.raises(AlertRecordError, match="created_at is 'yesterday', not a date"):
        Alert.from_doc(DAMAGED[2] | {"created_at": "yesterday"})
