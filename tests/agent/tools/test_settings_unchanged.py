"""``manage_settings`` update says which asked-for fields already had that value."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import call_tool, scheduled_app


async def test_a_value_equal_to_the_stored_one_is_reported_unchanged(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN))
    model = ScriptedModel(lambda _r: "ok")
    telegram = RecordingChannel("telegram")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin",
        owner_telegram_ids=[4242],
    ) as app:  # fmt: skip

        async def update(**args: Any) -> dict[str, Any]:
            result: dict[str, Any] = await call_tool(
                app, "manage_settings", action="update", **args
            )
            return result

        same = await update(quiet_hours=[{"start": "22:00", "end": "07:00"}])
        mixed = await update(
            quiet_hours=[{"start": "23:00", "end": "07:00"}], timezone="Europe/Berlin"
        )
        changed = await update(primary_channel="telegram")
        again = await update(primary_channel="telegram", quiet_hours=[])
    assert same["success"] is True and same["unchanged"] == ["quiet_hours"]
    assert mixed["unchanged"] == ["timezone"]
    assert mixed["quiet_hours"] == [{"start": "23:00", "end": "07:00"}]
    assert "unchanged" not in changed and changed["primary_channel"] == "telegram"
    assert again["unchanged"] == ["primary_channel"] and again["quiet_hours"] == []
