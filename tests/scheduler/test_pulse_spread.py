"""Any pulse count 1-48, spread over the active (non-quiet) minutes of a local day.

Fixed datetimes only; the expected wall times are worked out by hand in the comments.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.pulse.grid import (
    QuietHours,
    active_spans,
    average_spacing,
    grid_slots,
    in_quiet_hours,
    make_schedule,
    next_pulse,
    remaining_today,
    upcoming_pulses,
)
from tests.scheduler.timing_kit import AUTUMN, BERLIN, SPRING, berlin, walls

NEW_YORK = ZoneInfo("America/New_York")
NY_SPRING = date(2026, 3, 8)  # 02:00 EST → 03:00 EDT
NY_FALL = date(2026, 11, 1)  # 02:00 EDT → 01:00 EST
MONDAY = date(2026, 5, 4)
NIGHT = [{"start": "22:00", "end": "07:00"}]


def _hm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@pytest.mark.parametrize(
    ("per_day", "expected"),
    [
        (1, ["00:00"]),
        # 1440 / 7 = 205.7: floor(i * 205.7) minutes
        (7, ["00:00", "03:25", "06:51", "10:17", "13:42", "17:08", "20:34"]),
        (8, [f"{h:02d}:00" for h in range(0, 24, 3)]),
        (12, [f"{h:02d}:00" for h in range(0, 24, 2)]),
        (48, [_hm(m) for m in range(0, 1440, 30)]),
    ],
)
def test_counts_round_the_clock(per_day: int, expected: list[str]) -> None:
    slots = grid_slots(make_schedule(pulses_per_day=per_day), MONDAY)
    assert walls(slots) == expected
    assert all(slot.second == 0 and slot.microsecond == 0 for slot in slots)


@pytest.mark.parametrize(
    ("per_day", "expected"),
    [
        (1, ["07:00"]),
        # 900 active minutes from 07:00; 900 / 7 = 128.6
        (7, ["07:00", "09:08", "11:17", "13:25", "15:34", "17:42", "19:51"]),
        # 900 / 8 = 112.5
        (8, ["07:00", "08:52", "10:45", "12:37", "14:30", "16:22", "18:15", "20:07"]),
        (12, [_hm(420 + 75 * i) for i in range(12)]),
        (48, [_hm(420 + (i * 900) // 48) for i in range(48)]),
    ],
)
def test_counts_not_at_night(per_day: int, expected: list[str]) -> None:
    schedule = make_schedule(pulses_per_day=per_day, quiet_hours=NIGHT, tz=BERLIN)
    slots = grid_slots(schedule, MONDAY)
    assert walls(slots) == expected
    assert len(slots) == per_day
    assert not any(in_quiet_hours(schedule.quiet_hours, slot, BERLIN) for slot in slots)


def test_twelve_a_day_not_at_night_is_twelve_on_whole_minutes() -> None:
    schedule = make_schedule(pulses_per_day=12, quiet_hours=NIGHT, tz=BERLIN)
    slots = grid_slots(schedule, MONDAY)
    assert walls(slots)[:3] == ["07:00", "08:15", "09:30"] and walls(slots)[-1] == "20:45"
    assert len(slots) == 12
    assert all(time(7) <= slot.time() < time(22) and slot.second == 0 for slot in slots)
    assert average_spacing(schedule) == timedelta(minutes=75)
    assert active_spans(schedule.quiet_hours) == [("07:00", "22:00")]


def test_overlapping_windows_merge() -> None:
    quiet = [
        {"start": "22:00", "end": "07:00"},
        {"start": "06:00", "end": "08:00"},
        {"start": "23:00", "end": "01:00"},
    ]
    schedule = make_schedule(pulses_per_day=12, quiet_hours=quiet)
    # 08:00-22:00 is 840 active minutes: every 70 minutes
    assert walls(grid_slots(schedule, MONDAY)) == [_hm(480 + 70 * i) for i in range(12)]
    assert active_spans(schedule.quiet_hours) == [("08:00", "22:00")]


def test_midnight_window_and_a_lunch_break() -> None:
    quiet = [{"start": "23:00", "end": "06:00"}, {"start": "12:00", "end": "13:00"}]
    schedule = make_schedule(pulses_per_day=8, quiet_hours=quiet)
    # 06:00-12:00 (360) + 13:00-23:00 (600) = 960 minutes: every 120 along the timeline
    expected = ["06:00", "08:00", "10:00", "13:00", "15:00", "17:00", "19:00", "21:00"]
    assert walls(grid_slots(schedule, MONDAY)) == expected
    assert active_spans(schedule.quiet_hours) == [("06:00", "12:00"), ("13:00", "23:00")]


def test_quiet_early_morning_timeline_starts_at_midnight() -> None:
    schedule = make_schedule(pulses_per_day=4, quiet_hours=[{"start": "02:00", "end": "05:00"}])
    # 00:00-02:00 (120) + 05:00-24:00 (1140) = 1260: offsets 0, 315, 630, 945
    assert walls(grid_slots(schedule, MONDAY)) == ["00:00", "08:15", "13:30", "18:45"]
    assert active_spans(schedule.quiet_hours) == [("00:00", "02:00"), ("05:00", "24:00")]


def test_more_pulses_than_active_minutes_use_each_minute_once() -> None:
    schedule = make_schedule(pulses_per_day=12, quiet_hours=[{"start": "07:05", "end": "07:00"}])
    assert walls(grid_slots(schedule, MONDAY)) == ["07:00", "07:01", "07:02", "07:03", "07:04"]
    assert average_spacing(schedule) == timedelta(minutes=1)
    assert remaining_today(schedule, 0, datetime(2026, 5, 4, 7, 2, tzinfo=UTC)) == 2


def test_a_day_that_is_all_quiet_has_no_pulse() -> None:
    quiet = [{"start": "00:00", "end": "12:00"}, {"start": "12:00", "end": "00:00"}]
    schedule = make_schedule(pulses_per_day=12, quiet_hours=quiet)
    assert grid_slots(schedule, MONDAY) == []
    assert next_pulse(schedule, datetime(2026, 5, 4, tzinfo=UTC)) is None
    assert average_spacing(schedule) is None
    assert active_spans(schedule.quiet_hours) == []


def test_inactive_days_have_no_slots_and_are_skipped() -> None:
    schedule = make_schedule(
        pulses_per_day=7, active_days=[1, 2, 3, 4, 5], quiet_hours=NIGHT, tz=BERLIN
    )
    friday, saturday, sunday = date(2026, 5, 8), date(2026, 5, 9), date(2026, 5, 10)
    assert len(grid_slots(schedule, friday)) == 7
    assert grid_slots(schedule, saturday) == grid_slots(schedule, sunday) == []
    got = next_pulse(schedule, berlin(2026, 5, 8, 19, 51))
    assert got is not None and got.isoformat() == "2026-05-11T07:00:00+02:00"


# --- DST ------------------------------------------------------------------------------
def test_spring_gap_is_quiet_anyway_in_berlin() -> None:
    schedule = make_schedule(pulses_per_day=12, quiet_hours=NIGHT, tz=BERLIN)
    assert walls(grid_slots(schedule, SPRING)) == walls(grid_slots(schedule, MONDAY))


def test_spring_slot_moves_to_the_gap_end_in_berlin() -> None:
    slots = grid_slots(make_schedule(pulses_per_day=12, tz=BERLIN), SPRING)
    assert walls(slots)[:3] == ["00:00", "03:00", "04:00"]  # 02:00 does not exist
    assert slots[1].isoformat() == "2026-03-29T03:00:00+02:00"
    assert len(slots) == 12


def test_a_moved_slot_never_lands_in_quiet_hours() -> None:
    quiet = [{"start": "03:00", "end": "04:00"}]
    schedule = make_schedule(pulses_per_day=24, quiet_hours=quiet, tz=BERLIN)
    slots = grid_slots(schedule, SPRING)
    # 1380 active minutes / 24 = 57.5: 02:52 is in the gap, 03:00-04:00 is quiet
    assert walls(slots)[:5] == ["00:00", "00:57", "01:55", "04:00", "04:50"]
    assert len(slots) == 24
    assert not any(in_quiet_hours(schedule.quiet_hours, slot, BERLIN) for slot in slots)


@pytest.mark.parametrize("per_day", [12, 24, 48])
def test_spring_forward_in_new_york(per_day: int) -> None:
    slots = grid_slots(make_schedule(pulses_per_day=per_day, tz=NEW_YORK), NY_SPRING)
    assert len(slots) == per_day
    assert len({slot.astimezone(UTC) for slot in slots}) == per_day
    assert not [wall for wall in walls(slots) if "02:00" <= wall < "03:00"]
    assert "03:00" in walls(slots)
    assert slots == sorted(slots)


@pytest.mark.parametrize(
    ("tz", "day", "folded", "offset"),
    [(BERLIN, AUTUMN, "02:30", "+02:00"), (NEW_YORK, NY_FALL, "01:30", "-04:00")],
)
def test_fall_back_uses_each_wall_minute_once(
    tz: ZoneInfo, day: date, folded: str, offset: str
) -> None:
    slots = grid_slots(make_schedule(pulses_per_day=48, tz=tz), day)
    assert len(slots) == 48 and walls(slots) == [_hm(m) for m in range(0, 1440, 30)]
    at = walls(slots).index(folded)
    assert slots[at].isoformat().endswith(offset)  # the first occurrence
    # the second occurrence is left out: 90 minutes until the next slot
    assert slots[at + 1].astimezone(UTC) - slots[at].astimezone(UTC) == timedelta(minutes=90)


# --- next_pulse, upcoming_pulses, remaining_today ---------------------------------------
@pytest.mark.parametrize(
    ("tz", "first_day"), [(BERLIN, SPRING - timedelta(days=3)), (NEW_YORK, NY_FALL)]
)
@pytest.mark.parametrize("per_day", [1, 7, 12, 48])
def test_next_and_upcoming_agree_with_the_grid(tz: ZoneInfo, first_day: date, per_day: int) -> None:
    schedule = make_schedule(
        pulses_per_day=per_day, active_days=[0, 1, 3, 5], quiet_hours=NIGHT, tz=tz
    )
    days = [first_day + timedelta(days=i) for i in range(7)]
    grid = [slot for day in days for slot in grid_slots(schedule, day)]
    start = datetime.combine(first_day, time(0), tzinfo=tz) - timedelta(minutes=1)
    walked: list[datetime] = []
    moment = next_pulse(schedule, start)
    while moment is not None and moment <= grid[-1]:
        walked.append(moment)
        moment = next_pulse(schedule, moment)
    assert walked == grid
    assert upcoming_pulses(schedule, start, grid[-1]) == grid
    assert all(slot.tzinfo is tz for slot in walked)


@pytest.mark.parametrize(("done", "expected"), [(0, 7), (4, 7), (8, 4), (12, 0)])
def test_remaining_today_not_at_night(done: int, expected: int) -> None:
    schedule = make_schedule(pulses_per_day=12, quiet_hours=NIGHT, tz=BERLIN)
    # after 12:30: 13:15, 14:30, 15:45, 17:00, 18:15, 19:30, 20:45
    assert remaining_today(schedule, done, berlin(2026, 5, 4, 12, 30)) == expected


def test_equal_schedules_share_one_grid() -> None:
    one = make_schedule(pulses_per_day=9, quiet_hours=[QuietHours(time(1), time(6))])
    two = make_schedule(pulses_per_day=9, quiet_hours=[{"start": "01:00", "end": "06:00"}])
    assert one == two and hash(one) == hash(two)
    assert grid_slots(one, MONDAY) == grid_slots(two, MONDAY)
