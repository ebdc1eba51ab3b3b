"""``manage_monitor``: its contract (DESIGN.md), who gets it, and the errors the model
reads and can relay (bad URL, interval under 30 s, the 51st monitor, an unknown id).

The app runs with the monitors feature at its real limits (30 s, 50 monitors)."""

from __future__ import annotations

from typing import Any

from agent.app.features.monitors import monitoring
from agent.tools.base import compact_schema
from agent.tools.monitors import MonitorArgs
from tests.contexts import contact_ctx, owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import PUBLIC_URL, Harness, alert_app

ARGUMENTS = {
    "action", "monitor_id", "name", "kind", "url", "interval_seconds", "expect_status",
    "keyword", "selector", "period_seconds", "grace_seconds", "severity",
    "failures_before_alert",
}  # fmt: skip
"""DESIGN.md's ``manage_monitor`` (issue 40 added ``change`` and its ``selector``)."""


async def call(h: Harness, **arguments: Any) -> dict[str, Any]:
    tools = h.app.catalog.for_context(owner_ctx(h.app.deps))
    return await tools.call("manage_monitor", arguments, owner_ctx(h.app.deps))


def test_the_arguments_are_the_contract() -> None:
    schema = compact_schema(MonitorArgs)
    assert set(schema["properties"]) == ARGUMENTS
    assert schema["properties"]["action"]["enum"] == [
        "create", "list", "update", "delete", "pause", "resume",
    ]  # fmt: skip
    assert schema["properties"]["kind"]["enum"] == ["http", "heartbeat", "change"]
    assert schema["properties"]["severity"]["enum"] == ["info", "warning", "critical"]


async def test_owner_chats_get_it_contacts_and_the_pulse_do_not(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(monitoring(),)) as h:
        catalog, deps = h.app.catalog, h.app.deps
        assert "manage_monitor" in catalog.for_context(owner_ctx(deps))
        assert "manage_monitor" in catalog.for_context(owner_ctx(deps, kind="cron"))
        assert "manage_monitor" not in catalog.for_context(owner_ctx(deps, kind="pulse"))
        assert "manage_monitor" not in catalog.for_context(contact_ctx(deps))
    async with alert_app(app_db) as h:  # no monitors feature: no tool
        assert "manage_monitor" not in h.app.catalog.for_context(owner_ctx(h.app.deps))


async def test_the_model_manages_monitors(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(monitoring(),)) as h:
        made = await call(
            h, action="create", name="Backups", kind="heartbeat", period_seconds=86_400
        )
        beat = made["created"]
        assert beat["ping_url"].startswith(f"{PUBLIC_URL}/ping/") and beat["status"] == "new"
        assert beat["grace_seconds"] == 3600
        changed = await call(h, action="update", monitor_id="backups", grace_seconds=600)
        assert changed["updated"]["grace_seconds"] == 600
        assert "ping_url" not in changed["updated"]  # shown once, at creation
        paused = await call(h, action="pause", monitor_id=beat["id"])
        assert paused["paused"]["status"] == "paused" and paused["paused"]["late_after"] is None
        resumed = await call(h, action="resume", monitor_id=beat["id"])
        assert resumed["resumed"]["status"] == "new"
        listed = await call(h, action="list")
        assert listed["count"] == 1 and listed["monitors"][0]["name"] == "Backups"
        gone = await call(h, action="delete", monitor_id=beat["id"])
        assert gone == {"deleted": beat["id"], "name": "Backups"}
        assert (await call(h, action="list"))["count"] == 0
        assert h.model.requests == []


async def test_errors_are_sentences_the_model_can_relay(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(monitoring(),)) as h:
        http = {"action": "create", "kind": "http", "name": "NAS"}
        for arguments, says in (
            (http | {"url": "nas.local"}, "url must start with http:// or https://"),
            (http | {"url": "http://"}, "has no host name"),
            (http | {"url": "http://10.0.0.2", "interval_seconds": 10},
             "interval_seconds must be between 30 and 86400 (a check at most every 30 s)"),
            (http | {"url": "http://10.0.0.2", "period_seconds": 60},
             "period_seconds only apply to a heartbeat"),
            (http | {"url": "http://10.0.0.2", "failures_before_alert": 0},
             "failures_before_alert must be between 1 and 10"),
            ({"action": "create", "name": "x", "kind": "heartbeat", "period_seconds": 5},
             "period_seconds must be between 30"),
            ({"action": "create", "name": "x", "kind": "heartbeat", "period_seconds": 60,
              "keyword": "ok"}, "keyword only apply to an http monitor"),
            ({"action": "create", "kind": "heartbeat", "period_seconds": 60},
             "name must be a non-empty text"),
            ({"action": "delete", "monitor_id": "nope"},
             "no monitor with id 'nope'; use action 'list' to see the ids"),
            ({"action": "pause"}, "monitor_id is required"),
            ({"action": "create", "name": "x", "kind": "heartbeat", "period_seconds": 60,
              "severity": "urgent"}, "invalid arguments for manage_monitor: severity"),
        ):  # fmt: skip
            result = await call(h, **arguments)
            assert says in result.get("error", ""), (arguments, result)
        for n in range(50):
            made = await call(
                h, action="create", name=f"job {n}", kind="heartbeat", period_seconds=3600
            )
            assert "created" in made, made
        result = await call(
            h, action="create", name="one more", kind="heartbeat", period_seconds=3600
        )
        assert result == {
            "error": "there are already 50 monitors, the most allowed; delete one first"
        }
        first = (await call(h, action="list"))["monitors"][0]
        result = await call(h, action="update", monitor_id=first["id"], kind="http")
        assert "its kind cannot change" in result["error"]
        result = await call(h, action="update", monitor_id=first["id"], name="job 7")
        assert "already a monitor named 'job 7'" in result["error"]
        assert h.model.requests == []
