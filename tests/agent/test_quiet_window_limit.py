"""At most seven quiet-hour windows (DESIGN.md, manage_settings): more are refused with a
clear error and nothing is stored; a settings document stored before the limit, with a
thousand windows, is read as its first seven (said once in the log), so no held alert or
pulse walks a thousand windows minute by minute."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.owner import MAX_QUIET_WINDOWS, OwnerSettings, SettingsError
from tests.fakes.clock import FakeClock

Doc = dict[str, Any]
NOON = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)


def minute_windows(count: int) -> list[dict[str, str]]:
    """``count`` one-minute windows, 00:00-00:01, 00:01-00:02, ... (the field report's)."""
    return [
        {"start": f"{m // 60:02d}:{m % 60:02d}", "end": f"{(m + 1) // 60:02d}:{(m + 1) % 60:02d}"}
        for m in range(count)
    ]


pytestmark = pytest.mark.clock(NOON)


async def test_eight_windows_are_refused_and_nothing_is_stored(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "UTC")
    with pytest.raises(SettingsError) as caught:
        await owner.update(quiet_hours=minute_windows(8), timezone="Europe/Berlin")
    assert str(caught.value) == (
        "quiet_hours has 8 windows; at most 7 are allowed (join overlapping or adjacent ones)"
    )
    assert await db["settings"].find_one({"_id": "owner"}) is None
    prefs = await owner.update(quiet_hours=minute_windows(7))
    assert prefs.quiet_dicts() == minute_windows(7)


async def test_a_thousand_stored_windows_are_read_as_the_first_seven(
    db: AsyncDatabase[Doc], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    await db["settings"].insert_one({"_id": "owner", "quiet_hours": minute_windows(1002)})
    owner = OwnerSettings(db, clock, "UTC")
    with caplog.at_level(logging.WARNING, logger="agent.owner"):
        prefs = await owner.load()
        await owner.load()  # every few seconds in a running process: said once
    assert prefs.quiet_dicts() == minute_windows(MAX_QUIET_WINDOWS)
    told = [r.getMessage() for r in caplog.records]
    assert told == [
        "the owner's settings has 1002 quiet-hour windows; only the first 7 are used "
        "(the limit); set them again with manage_settings"
    ]
    # The seven chain into one quiet stretch, 00:00-00:07.
    assert await owner.quiet_until(NOON.replace(hour=0, minute=3)) == NOON.replace(hour=0, minute=7)
    assert await owner.quiet_until(NOON.replace(hour=0, minute=8)) is None


async def test_a_thousand_windows_the_pulse_kept_move_as_seven(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    await db["settings"].insert_one({"_id": "pulse", "quiet_hours": minute_windows(1002)})
    prefs = await OwnerSettings(db, clock, "UTC").load()
    assert prefs.quiet_dicts() == minute_windows(7)
    stored = await db["settings"].find_one({"_id": "owner"})
    assert stored is not None and stored["quiet_hours"] == minute_windows(7)
