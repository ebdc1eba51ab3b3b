"""The owner's settings store: the document read once into typed values (a field stored
with the wrong shape read as unset, the others kept), written from them, and the
pending timezone change made once."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.owner_settings import OwnerSettingsStore, QuietWindow, StoredOwner, ZoneChange

Doc = dict[str, Any]
NOW = datetime(2026, 3, 6, 12, tzinfo=UTC)
LATER = NOW + timedelta(days=1)


async def test_a_field_stored_damaged_is_unset_and_the_others_are_read(
    db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    await db["settings"].insert_one(
        {
            "_id": "owner",
            "quiet_hours": [{"start": "22:00"}],  # no end
            "timezone": 5,
            "primary_channel": "sms",
            "warning_sms_after_minutes": "ten",
            "pending_zone": {"timezone": "Asia/Tokyo", "at": LATER, "chat_id": 42},
            "zone_moving": {"timezone": "Asia/Tokyo"},  # no moment
        }
    )
    with caplog.at_level(logging.WARNING):
        stored = await OwnerSettingsStore(db).read()
    assert stored == StoredOwner(
        primary_channel="sms", pending_zone=ZoneChange("Asia/Tokyo", LATER, None, "42")
    )
    ignored = sorted(r.getMessage().split(":")[0] for r in caplog.records)
    assert ignored == [
        "stored quiet_hours ignored",
        "stored timezone ignored",
        "stored warning_sms_after_minutes ignored",
        "stored zone_moving ignored",
    ]


async def test_values_are_written_as_stored_and_a_zone_now_drops_the_pending_one(
    db: AsyncDatabase[Doc],
) -> None:
    store = OwnerSettingsStore(db)
    assert await store.read() == StoredOwner()
    later = ZoneChange("Asia/Tokyo", LATER, "telegram", "42")
    await store.change(
        updated_at=NOW, quiet_hours=[QuietWindow("22:00", "07:00")], pending_zone=later
    )
    raw = await db["settings"].find_one({"_id": "owner"})
    assert raw is not None and raw["quiet_hours"] == [{"start": "22:00", "end": "07:00"}]
    assert (await store.read()).pending_zone == later
    await store.change(updated_at=NOW, quiet_hours=[], timezone="Europe/Berlin")
    stored = await store.read()
    assert stored == StoredOwner(quiet_hours=(), timezone="Europe/Berlin")


async def test_a_pending_change_is_made_once_and_finished(db: AsyncDatabase[Doc]) -> None:
    store = OwnerSettingsStore(db)
    await store.change(updated_at=NOW, pending_zone=ZoneChange("Asia/Tokyo", LATER))
    made = ZoneChange("Asia/Tokyo", LATER, was="UTC", message="moved")
    assert await store.make_change(made, LATER) is True
    assert await store.make_change(made, LATER) is False  # another process: made already
    stored = await store.read()
    assert (stored.timezone, stored.pending_zone, stored.zone_moving) == ("Asia/Tokyo", None, made)
    await store.moved(made.at)
    assert (await store.read()).zone_moving is None


async def test_the_pulses_quiet_hours_are_adopted_unless_the_owner_has_some(
    db: AsyncDatabase[Doc],
) -> None:
    store = OwnerSettingsStore(db)
    assert await store.pulse_quiet_hours() is None
    await db["settings"].insert_one(
        {"_id": "pulse", "quiet_hours": [{"start": "23:00", "end": "06:00"}]}
    )
    windows = await store.pulse_quiet_hours()
    assert windows == (QuietWindow("23:00", "06:00"),)
    await store.adopt_quiet_hours(windows)
    await store.adopt_quiet_hours([QuietWindow("01:00", "02:00")])  # the owner's win
    await store.drop_pulse_quiet_hours()
    assert (await store.read()).quiet_hours == windows
    assert await store.pulse_quiet_hours() is None
