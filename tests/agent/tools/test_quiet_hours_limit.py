"""``manage_settings`` refuses more than seven quiet-hour windows with an error the model
can act on, changes nothing, and tells the model the limit in the tool's schema; an alert
routed over settings stored with a thousand windows uses the first seven."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.app.features.scheduling import SchedulingOptions, scheduling
from tests.agent.test_quiet_window_limit import minute_windows
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.scheduling_kit import call_tool

SCHEDULING = (scheduling(SchedulingOptions(timer=False)),)


async def test_a_thousand_windows_are_refused_and_nothing_changes(app_db: AppDb) -> None:
    async with alert_app(app_db, features=SCHEDULING) as h:
        refused = await call_tool(
            h.app, "manage_settings", action="update", quiet_hours=minute_windows(1002)
        )
        assert refused == {
            "error": "quiet_hours has 1002 windows; at most 7 are allowed (join overlapping "
            "or adjacent ones). Nothing was changed."
        }
        view = await call_tool(h.app, "manage_settings", action="get")
        assert view["quiet_hours"] == [{"start": "22:00", "end": "07:00"}]
        tools = h.app.catalog.for_context(owner_ctx(h.app.deps))
        [spec] = [s for s in tools.specs() if s.name == "manage_settings"]
        assert spec.parameters["properties"]["quiet_hours"]["maxItems"] == 7


async def test_an_alert_over_a_thousand_stored_windows_is_held_by_the_first_seven(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, features=SCHEDULING) as h:
        await h.app.deps.db["settings"].update_one(
            {"_id": "owner"}, {"$set": {"quiet_hours": minute_windows(1002)}}, upsert=True
        )
        assert h.app.deps.owner is not None
        await h.app.deps.owner.load()  # as a restart, or the next resync, reads it
        h.clock.set(datetime(2026, 11, 27, 0, 2, tzinfo=UTC))  # in window 3 of 7
        held = await h.router.raise_alert(severity="info", title="Backup finished")
        assert held.alert.held is True and h.chat.sent == []
        await h.tick(minutes=4)  # 00:06: still in the seventh
        assert h.chat.sent == []
        await h.tick(minutes=1)  # 00:07: the seven are over (the 995 after them are not read)
        assert [f"#{held.code}" in t for t in h.chat.texts()] == [True]
