"""The owner's settings document: defaults, validation, the move from the pulse, quiet
hours' end, and what a change does to the pulse and the cron jobs."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.owner import OwnerPrefs, OwnerSettings, SettingsError
from scheduler.cron.job import JobReader
from scheduler.cron.service import CronService
from scheduler.pulse.grid import QuietHours
from scheduler.pulse.store import PulseStore
from storage.repos.cron_jobs import CronJobStore
from storage.repos.pulse import PulseRepo
from tests.fakes.clock import BERLIN, FakeClock

Doc = dict[str, Any]
NIGHT = {"start": "22:00", "end": "07:00"}


def berlin(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=BERLIN)


pytestmark = pytest.mark.clock(berlin(6, 12))  # Friday noon


async def test_defaults_are_the_env_timezone_and_22_to_7(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "Europe/Berlin")
    prefs = await owner.load()
    assert prefs == OwnerPrefs("Europe/Berlin", (QuietHours(time(22), time(7)),), None)
    assert owner.tz == BERLIN and await db["settings"].find_one({"_id": "owner"}) is None


GOOD = {"timezone": "Europe/Berlin"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"quiet_hours": [{"start": "25:00", "end": "07:00"}], **GOOD},
            "'25:00': hour must be 0-23",
        ),
        ({"quiet_hours": [{"start": "22:00"}], **GOOD}, "quiet_hours[0] is missing end"),
        ({"quiet_hours": "22-7", **GOOD}, "quiet_hours must be a list"),
        ({"timezone": "Mars/Olympus", "quiet_hours": []}, "unknown timezone 'Mars/Olympus'"),
        ({"primary_channel": "signal", **GOOD}, "primary_channel 'signal' is not a channel"),
        ({}, "nothing to update"),
    ],
)
async def test_a_bad_value_is_named_and_nothing_is_stored(
    db: AsyncDatabase[Doc], clock: FakeClock, change: dict[str, Any], message: str
) -> None:
    """The good value beside the bad one is not stored either."""
    owner = OwnerSettings(db, clock, "UTC")
    with pytest.raises(SettingsError) as caught:
        await owner.update(**change)
    assert message in str(caught.value)
    assert await db["settings"].find_one({"_id": "owner"}) is None
    assert owner.current == OwnerPrefs("UTC", (QuietHours(time(22), time(7)),))


async def test_update_stores_each_field_with_set_and_load_reads_it_back(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "UTC")
    await owner.update(timezone="Europe/Berlin")
    await owner.update(primary_channel="WhatsApp", quiet_hours=[])
    doc = await db["settings"].find_one({"_id": "owner"})
    assert doc is not None
    assert (doc["timezone"], doc["primary_channel"], doc["quiet_hours"]) == (
        "Europe/Berlin",
        "whatsapp",
        [],
    )
    other = OwnerSettings(db, clock, "UTC")  # another process
    assert await other.load() == OwnerPrefs("Europe/Berlin", (), "whatsapp")


async def test_quiet_hours_move_from_the_pulse_once(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    await db["settings"].insert_one(
        {"_id": "pulse", "pulses_per_day": 6, "quiet_hours": [{"start": "23:30", "end": "06:15"}]}
    )
    owner = OwnerSettings(db, clock, "UTC")
    prefs = await owner.load()
    assert prefs.quiet_dicts() == [{"start": "23:30", "end": "06:15"}]
    pulse = await db["settings"].find_one({"_id": "pulse"})
    assert pulse == {"_id": "pulse", "pulses_per_day": 6}  # the rest of the pulse stays
    owner_doc = await db["settings"].find_one({"_id": "owner"})
    assert owner_doc == {"_id": "owner", "quiet_hours": [{"start": "23:30", "end": "06:15"}]}
    # Again (another process, a restart): nothing changes.
    assert await OwnerSettings(db, clock, "UTC").load() == prefs
    assert await db["settings"].find_one({"_id": "owner"}) == owner_doc


async def test_the_owners_own_quiet_hours_win_over_the_pulses(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    await db["settings"].insert_many(
        [
            {"_id": "owner", "quiet_hours": [{"start": "21:00", "end": "08:00"}]},
            {"_id": "pulse", "quiet_hours": [NIGHT]},
        ]
    )
    prefs = await OwnerSettings(db, clock, "UTC").load()
    assert prefs.quiet_dicts() == [{"start": "21:00", "end": "08:00"}]
    pulse = await db["settings"].find_one({"_id": "pulse"})
    assert pulse is not None and "quiet_hours" not in pulse


async def test_quiet_until_is_the_end_in_the_owners_timezone(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "Europe/Berlin")
    await owner.update(quiet_hours=[NIGHT, {"start": "06:30", "end": "08:00"}])
    assert await owner.quiet_until(berlin(6, 12)) is None
    assert await owner.quiet_until(berlin(6, 21, 59)) is None
    # Chained windows: quiet from 22:00 until 08:00 the next morning.
    assert await owner.quiet_until(berlin(6, 23, 10)) == berlin(7, 8)
    await owner.update(timezone="Asia/Tokyo")  # 23:10 Berlin is 07:10 in Tokyo: quiet
    assert await owner.quiet_until(berlin(6, 23, 10)) == datetime(
        2026, 3, 7, 8, tzinfo=ZoneInfo("Asia/Tokyo")
    )
    await owner.update(quiet_hours=[])
    assert await owner.quiet_until(berlin(6, 23, 10)) is None


async def test_a_timezone_change_moves_jobs_on_the_old_clock_only(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "Europe/Berlin")
    jobs = CronService(CronJobStore(db, JobReader()), clock, "Europe/Berlin")

    async def follow(old: OwnerPrefs, new: OwnerPrefs) -> None:
        await jobs.move_timezone(old.timezone, new.timezone)

    owner.listeners.append(follow)
    home = await jobs.create(name="Home", instruction="x", cron_expression="0 9 * * *")
    tokyo = await jobs.create(
        name="Tokyo", instruction="y", cron_expression="0 9 * * *", timezone="Asia/Tokyo"
    )
    assert home.next_fire_at == datetime(2026, 3, 7, 8, tzinfo=UTC)  # 09:00 CET
    await owner.update(timezone="America/New_York")
    moved, kept = await jobs.get(home.id), await jobs.get(tokyo.id)
    assert moved.timezone == "America/New_York"
    assert moved.next_fire_at == datetime(2026, 3, 6, 14, tzinfo=UTC)  # 09:00 EST today
    assert kept.timezone == "Asia/Tokyo" and kept.next_fire_at == tokyo.next_fire_at
    assert jobs.default_timezone == "America/New_York"


async def test_the_pulse_follows_the_owners_quiet_hours_and_timezone(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    owner = OwnerSettings(db, clock, "Europe/Berlin")
    pulse = PulseStore(PulseRepo(db), clock, owner)
    heard: list[str] = []

    async def changed() -> None:
        heard.append("pulse")

    pulse.listeners.append(changed)
    await owner.update(quiet_hours=[{"start": "12:00", "end": "18:00"}])
    state = await pulse.update_config(pulses_per_day=24)
    assert [q.as_dict() for q in state.quiet_hours] == [{"start": "12:00", "end": "18:00"}]
    assert state.next_pulse_at == berlin(6, 18)  # the first slot after the quiet hours
    await owner.update(quiet_hours=[])  # re-planned at once: the afternoon is open again
    after = (await pulse.get()).next_pulse_at
    assert after is not None and berlin(6, 12) < after < berlin(6, 18)
    assert heard == ["pulse", "pulse", "pulse"]  # every change re-arms the timer at once
    await owner.update(timezone="Asia/Tokyo")
    assert pulse.tz == ZoneInfo("Asia/Tokyo")
    doc = await db["settings"].find_one({"_id": "pulse"})
    assert doc is not None and "quiet_hours" not in doc
