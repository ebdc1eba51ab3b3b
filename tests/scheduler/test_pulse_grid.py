"""Pure pulse timing: the grid, quiet hours, active days, DST, next and remaining pulses.

Every test uses fixed datetimes; nothing reads the clock or sleeps.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest

from scheduler.cron.expression import next_fires
from scheduler.pulse.grid import (
    PULSES_PER_DAY,
    PulseConfigError,
    QuietHours,
    day_bounds,
    grid_slots,
    in_quiet_hours,
    local_day,
    make_schedule,
    next_pulse,
    parse_quiet_hours,
    remaining_today,
    upcoming_pulses,
)
from tests.scheduler.timing_kit import AUTUMN, BERLIN, SPRING, SUNDAY, berlin, steps, utc, walls


def test_calendar_facts_used_below() -> None:
    assert SUNDAY.strftime("%A") == "Sunday"
    assert SPRING.strftime("%A") == AUTUMN.strftime("%A") == "Sunday"
    assert berlin(2026, 3, 29, 1, 59).utcoffset() == timedelta(hours=1)
    assert berlin(2026, 3, 29, 3, 0).utcoffset() == timedelta(hours=2)
    assert berlin(2026, 10, 25, 3, 0).utcoffset() == timedelta(hours=1)


# --- pulse grid ----------------------------------------------------------------------
def test_grid_twelve_per_day_is_every_two_hours_from_midnight() -> None:
    schedule = make_schedule(pulses_per_day=12)
    slots = grid_slots(schedule, date(2026, 5, 4))
    assert walls(slots) == [f"{h:02d}:00" for h in range(0, 24, 2)]
    assert all(slot.tzinfo is schedule.tz for slot in slots)


def test_grid_forty_eight_per_day_is_every_half_hour() -> None:
    slots = grid_slots(make_schedule(pulses_per_day=48), date(2026, 5, 4))
    assert len(slots) == 48
    assert walls(slots)[:3] == ["00:00", "00:30", "01:00"]
    assert walls(slots)[-1] == "23:30"
    assert steps(slots) == {timedelta(minutes=30)}


@pytest.mark.parametrize("per_day", [1, 2, 5, 7, 36, 48])
def test_any_whole_count_from_one_to_forty_eight(per_day: int) -> None:
    assert per_day in PULSES_PER_DAY
    assert make_schedule(pulses_per_day=per_day).pulses_per_day == per_day


@pytest.mark.parametrize("bad", [0, -1, 49, 96, "12", True, None, 12.0])
def test_invalid_pulses_per_day(bad: object) -> None:
    expected = f"pulses_per_day must be a whole number from 1 to 48 (got {bad!r})"
    with pytest.raises(PulseConfigError) as caught:
        make_schedule(pulses_per_day=bad)  # type: ignore[arg-type]
    assert str(caught.value) == expected


def test_grid_in_local_time_zone() -> None:
    schedule = make_schedule(pulses_per_day=2, tz="Europe/Berlin")
    slots = grid_slots(schedule, date(2026, 7, 1))
    assert [slot.isoformat() for slot in slots] == [
        "2026-07-01T00:00:00+02:00",
        "2026-07-01T12:00:00+02:00",
    ]


def test_quiet_hours_across_midnight_remove_night_slots() -> None:
    schedule = make_schedule(pulses_per_day=48, quiet_hours=[{"start": "22:00", "end": "07:00"}])
    got = walls(grid_slots(schedule, date(2026, 5, 4)))
    assert got[0] == "07:00"
    assert got[-1] == "21:41"  # 07:00 + floor(47 * 900 / 48) minutes
    assert len(got) == 48
    assert all("07:00" <= wall < "22:00" for wall in got)


def test_quiet_hours_within_a_day() -> None:
    schedule = make_schedule(pulses_per_day=24, quiet_hours=[{"start": "12:00", "end": "14:00"}])
    got = walls(grid_slots(schedule, date(2026, 5, 4)))
    assert not [wall for wall in got if "12:00" <= wall < "14:00"]
    assert got[:3] == ["00:00", "00:55", "01:50"]  # 1320 active minutes / 24
    assert got[13:15] == ["11:55", "14:50"]
    assert len(got) == 24


@pytest.mark.parametrize(
    ("moment", "quiet"),
    [
        (time(22, 0), True),
        (time(21, 59), False),
        (time(0, 0), True),
        (time(6, 59), True),
        (time(7, 0), False),
        (time(12, 0), False),
    ],
)
def test_overnight_window_contains(moment: time, quiet: bool) -> None:
    assert QuietHours(time(22), time(7)).contains(moment) is quiet


def test_in_quiet_hours_uses_local_clock() -> None:
    windows = parse_quiet_hours([{"start": "22:00", "end": "07:00"}])
    assert in_quiet_hours(windows, utc(2026, 7, 1, 20, 30), BERLIN)  # 22:30 CEST
    assert not in_quiet_hours(windows, utc(2026, 7, 1, 5, 0), BERLIN)  # 07:00 CEST


def test_parse_quiet_hours_accepts_unpadded_and_edges() -> None:
    parsed = parse_quiet_hours(
        [{"start": "7:05", "end": "23:59"}, {"start": "00:00", "end": "6:00"}]
    )
    assert parsed == [QuietHours(time(7, 5), time(23, 59)), QuietHours(time(0), time(6))]
    assert parsed[0].as_dict() == {"start": "07:05", "end": "23:59"}
    assert parse_quiet_hours([]) == []


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [{"start": "25:00", "end": "07:00"}],
            r"quiet_hours\[0\]\.start '25:00': hour must be 0-23",
        ),
        ([{"start": "7am", "end": "09:00"}], r"'7am' is not a time; use 24-hour HH:MM"),
        ([{"start": "22:00", "end": "12:60"}], r"\.end '12:60': minute must be 0-59"),
        ([{"start": "22:00", "end": "24:00"}], "hour must be 0-23"),
        ([{"start": "", "end": "07:00"}], "is not a time"),
        ([{"start": "22:00", "end": 7}], "must be a string"),
        ([{"start": "22:00", "end": "22:00"}], "starts and ends at the same time"),
        ([{"start": "22:00"}], r"quiet_hours\[0\] is missing end"),
        ([{}], "is missing end and start"),
        ([{"start": "22:00", "end": "07:00", "days": "1"}], "unknown key.*days"),
        (
            [{"start": "22:00", "end": "07:00"}, {"begin": "1:00", "end": "2:00"}],
            r"quiet_hours\[1\] has unknown key",
        ),
        (["22:00-07:00"], "must be an object"),
        ("22:00-07:00", "must be a list"),
    ],
)
def test_parse_quiet_hours_errors(items: object, message: str) -> None:
    with pytest.raises(PulseConfigError, match=message):
        parse_quiet_hours(items)  # type: ignore[arg-type]


def test_sunday_only_schedule() -> None:
    schedule = make_schedule(pulses_per_day=6, active_days=[0])
    assert len(grid_slots(schedule, SUNDAY)) == 6
    for offset in range(1, 7):
        assert grid_slots(schedule, SUNDAY + timedelta(days=offset)) == []


@pytest.mark.parametrize("day_number", range(7))
def test_day_numbers_match_calendar(day_number: int) -> None:
    schedule = make_schedule(pulses_per_day=2, active_days=[day_number])
    day = SUNDAY + timedelta(days=day_number)  # 2026-03-01 is a Sunday
    names = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    assert day.strftime("%A") == names[day_number]
    assert len(grid_slots(schedule, day)) == 2
    assert grid_slots(schedule, day + timedelta(days=1)) == []


@pytest.mark.parametrize("bad", [[7], [-1], ["1"], [True], [1, 9]])
def test_invalid_active_days(bad: list[object]) -> None:
    with pytest.raises(PulseConfigError, match=f"active_days contains {bad[-1]!r}"):
        make_schedule(active_days=bad)  # type: ignore[arg-type]


def test_no_active_days_means_never() -> None:
    schedule = make_schedule(active_days=[])
    assert grid_slots(schedule, SUNDAY) == []
    assert next_pulse(schedule, utc(2026, 3, 1)) is None


def test_unknown_timezone_in_schedule() -> None:
    with pytest.raises(PulseConfigError, match="unknown timezone 'Mars/Base'"):
        make_schedule(tz="Mars/Base")


def test_spring_forward_moves_missing_slot_to_the_next_free_minute() -> None:
    schedule = make_schedule(pulses_per_day=24, tz=BERLIN)
    slots = grid_slots(schedule, SPRING)
    assert len(slots) == 24
    assert "02:00" not in walls(slots)
    assert walls(slots)[1:5] == ["01:00", "03:00", "03:01", "04:00"]  # 02:00 moved
    assert len({slot.astimezone(UTC) for slot in slots}) == 24


def test_spring_forward_half_hour_grid() -> None:
    slots = grid_slots(make_schedule(pulses_per_day=48, tz=BERLIN), SPRING)
    assert len(slots) == 48
    assert walls(slots)[3:8] == ["01:30", "03:00", "03:01", "03:02", "03:30"]
    assert len({slot.astimezone(UTC) for slot in slots}) == 48


def test_fall_back_uses_ambiguous_slot_once() -> None:
    slots = grid_slots(make_schedule(pulses_per_day=24, tz=BERLIN), AUTUMN)
    assert len(slots) == 24
    assert walls(slots).count("02:00") == 1
    two = slots[2]
    assert two.isoformat() == "2026-10-25T02:00:00+02:00"  # first occurrence (CEST)
    assert slots[3].astimezone(UTC) - two.astimezone(UTC) == timedelta(hours=2)


def test_next_pulse_strictly_after() -> None:
    schedule = make_schedule(pulses_per_day=12)
    assert next_pulse(schedule, utc(2026, 5, 4, 1, 0)) == utc(2026, 5, 4, 2, 0)
    assert next_pulse(schedule, utc(2026, 5, 4, 2, 0)) == utc(2026, 5, 4, 4, 0)
    assert next_pulse(schedule, utc(2026, 5, 4, 22, 0)) == utc(2026, 5, 5, 0, 0)


def test_next_pulse_skips_inactive_days_and_quiet_hours() -> None:
    schedule = make_schedule(
        pulses_per_day=12,
        active_days=[1],  # Monday
        quiet_hours=[{"start": "00:00", "end": "08:00"}],
        tz=BERLIN,
    )
    saturday_night = berlin(2026, 3, 7, 23, 0)
    got = next_pulse(schedule, saturday_night)
    assert got is not None
    assert got.isoformat() == "2026-03-09T08:00:00+01:00"
    assert got.tzinfo is BERLIN


def test_next_pulse_disabled() -> None:
    assert next_pulse(make_schedule(enabled=False), utc(2026, 5, 4)) is None


def test_upcoming_pulses_window_is_start_exclusive_end_inclusive() -> None:
    schedule = make_schedule(pulses_per_day=12)
    got = upcoming_pulses(schedule, utc(2026, 5, 4, 2, 0), utc(2026, 5, 4, 8, 0))
    assert got == [utc(2026, 5, 4, 4), utc(2026, 5, 4, 6), utc(2026, 5, 4, 8)]
    assert upcoming_pulses(schedule, utc(2026, 5, 4, 8), utc(2026, 5, 4, 2)) == []


def test_upcoming_pulses_span_days() -> None:
    schedule = make_schedule(pulses_per_day=2, tz=BERLIN)
    got = upcoming_pulses(schedule, berlin(2026, 5, 4, 13), berlin(2026, 5, 7, 13))
    assert len(got) == 6
    assert steps(got) == {timedelta(hours=12)}


@pytest.mark.parametrize(("done", "expected"), [(0, 7), (5, 7), (8, 4), (12, 0), (20, 0)])
def test_remaining_today(done: int, expected: int) -> None:
    schedule = make_schedule(pulses_per_day=12)  # after 09:00: 10:00 .. 22:00 = 7 slots
    assert remaining_today(schedule, done, utc(2026, 5, 4, 9, 0)) == expected


def test_remaining_today_uses_local_day() -> None:
    schedule = make_schedule(pulses_per_day=12, tz=BERLIN)
    now = utc(2026, 6, 1, 23, 30)  # 01:30 CEST on 2 June: 02:00 .. 22:00 remain
    assert local_day(now, BERLIN) == date(2026, 6, 2)
    assert remaining_today(schedule, 0, now) == 11
    assert remaining_today(make_schedule(enabled=False), 0, now) == 0


@pytest.mark.parametrize(("day", "hours"), [(date(2026, 6, 2), 24), (SPRING, 23), (AUTUMN, 25)])
def test_day_bounds(day: date, hours: int) -> None:
    start, end = day_bounds(day, BERLIN)
    assert end - start == timedelta(hours=hours)
    assert start.astimezone(BERLIN).time() == time(0)
    assert end.astimezone(BERLIN).date() == day + timedelta(days=1)


def test_naive_datetimes_are_refused() -> None:
    schedule = make_schedule()
    with pytest.raises(ValueError, match="timezone-aware"):
        next_pulse(schedule, datetime(2026, 5, 4))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fires("@daily", BERLIN, datetime(2026, 5, 4))
