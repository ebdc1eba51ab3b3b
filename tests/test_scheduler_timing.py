"""Pure scheduler timing: pulse grid, quiet hours, cron validation, DST, rewrites.

Every test uses fixed datetimes; nothing reads the clock or sleeps.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.cron import (
    CronError,
    fires_between,
    next_fires,
    resolve_wall_time,
    validate_cron,
    validate_timezone,
)
from scheduler.cron_words import describe, reschedule
from scheduler.pulse_grid import (
    PULSES_PER_DAY,
    PulseConfigError,
    QuietHours,
    day_bounds,
    grid_slots,
    in_quiet_hours,
    interval_minutes,
    local_day,
    make_schedule,
    next_pulse,
    parse_quiet_hours,
    remaining_today,
    upcoming_pulses,
)

BERLIN = ZoneInfo("Europe/Berlin")
SPRING = date(2026, 3, 29)  # Europe/Berlin: 02:00 CET → 03:00 CEST
AUTUMN = date(2026, 10, 25)  # Europe/Berlin: 03:00 CEST → 02:00 CET
SUNDAY = date(2026, 3, 1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def berlin(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN)


def walls(slots: list[datetime]) -> list[str]:
    return [slot.strftime("%H:%M") for slot in slots]


def steps(slots: list[datetime]) -> set[timedelta]:
    instants = [slot.astimezone(UTC) for slot in slots]
    return {b - a for a, b in itertools.pairwise(instants)}


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


@pytest.mark.parametrize(
    ("per_day", "minutes"), [(48, 30), (24, 60), (12, 120), (6, 240), (2, 720)]
)
def test_interval_minutes(per_day: int, minutes: int) -> None:
    assert interval_minutes(per_day) == minutes
    assert per_day in PULSES_PER_DAY


@pytest.mark.parametrize("bad", [5, 0, 1, 36, 96, "12", True, None, 12.0])
def test_invalid_pulses_per_day(bad: object) -> None:
    with pytest.raises(PulseConfigError, match="pulses_per_day must be one of 48, 24, 12, 6, 2"):
        make_schedule(pulses_per_day=bad)  # type: ignore[arg-type]


def test_interval_minutes_refuses_unknown_count() -> None:
    with pytest.raises(PulseConfigError, match="got 5"):
        interval_minutes(5)


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
    assert got[-1] == "21:30"
    assert len(got) == 48 - 18
    assert not {"22:00", "23:30", "00:00", "03:00", "06:30"} & set(got)


def test_quiet_hours_within_a_day() -> None:
    schedule = make_schedule(pulses_per_day=24, quiet_hours=[{"start": "12:00", "end": "14:00"}])
    got = walls(grid_slots(schedule, date(2026, 5, 4)))
    assert "12:00" not in got and "13:00" not in got
    assert "11:00" in got and "14:00" in got
    assert len(got) == 22


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


def test_spring_forward_skips_missing_slot() -> None:
    schedule = make_schedule(pulses_per_day=24, tz=BERLIN)
    slots = grid_slots(schedule, SPRING)
    assert len(slots) == 23
    assert "02:00" not in walls(slots)
    assert walls(slots).count("03:00") == 1
    assert steps(slots) == {timedelta(hours=1)}


def test_spring_forward_half_hour_grid() -> None:
    slots = grid_slots(make_schedule(pulses_per_day=48, tz=BERLIN), SPRING)
    assert len(slots) == 46
    assert len({slot.astimezone(UTC) for slot in slots}) == 46


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


# --- cron validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "normalised"),
    [
        ("0 9 * * 1-5", "0 9 * * 1-5"),
        ("  0   9 *\t*  1-5 ", "0 9 * * 1-5"),
        ("*/15 * * * *", "*/15 * * * *"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
        ("0 0 * * 7", "0 0 * * 7"),
        ("@hourly", "@hourly"),
        ("@daily", "@daily"),
        ("@weekly", "@weekly"),
        ("@monthly", "@monthly"),
        ("@yearly", "@yearly"),
        (" @DAILY ", "@daily"),
    ],
)
def test_validate_cron_accepts(expression: str, normalised: str) -> None:
    assert validate_cron(expression) == normalised


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", r"'61 \* \* \* \*' is invalid: minute must be 0-59 \(got 61\)"),
        ("0 24 * * *", "hour must be 0-23"),
        ("0 0 32 * *", "day-of-month must be 1-31"),
        ("0 0 * 13 *", "month must be 1-12"),
        ("0 0 * * 8", "day-of-week must be 0-7"),
        ("*/0 * * * *", "minute step must be 1-59"),
        ("0 0 * * jan", "'jan' is not a valid day-of-week"),
        ("* * * *", "expected 5 fields .*got 4"),
        ("* * * * * *", "got 6; seconds are not supported"),
        ("every day", "expected 5 fields"),
        ("", "cron expression is empty"),
        ("   ", "cron expression is empty"),
        ("0 0 30 2 *", "never fires"),
        ("@reboot", "unknown alias"),
        ("H * * * *", "is invalid"),
    ],
)
def test_validate_cron_refuses(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        validate_cron(expression)


def test_validate_timezone() -> None:
    assert validate_timezone("Europe/Berlin") == BERLIN
    with pytest.raises(CronError, match="unknown timezone 'Mars/Base'"):
        validate_timezone("Mars/Base")
    with pytest.raises(CronError, match="timezone is empty"):
        validate_timezone("")


# --- next fires ------------------------------------------------------------------------


def test_next_fires_count_order_and_zone() -> None:
    friday = berlin(2026, 1, 9, 10, 0)
    got = next_fires("0 9 * * 1-5", BERLIN, friday)
    assert [fire.isoformat() for fire in got] == [
        "2026-01-12T09:00:00+01:00",
        "2026-01-13T09:00:00+01:00",
        "2026-01-14T09:00:00+01:00",
    ]
    assert all(fire.tzinfo is BERLIN for fire in got)


@pytest.mark.parametrize("count", [0, 1, 5, 20])
def test_next_fires_count(count: int) -> None:
    got = next_fires("*/5 * * * *", BERLIN, utc(2026, 1, 1), count)
    assert len(got) == count
    assert all(a < b for a, b in itertools.pairwise(got))


def test_next_fires_is_strictly_after() -> None:
    got = next_fires("0 9 * * *", BERLIN, berlin(2026, 1, 5, 9, 0), 1)
    assert got == [berlin(2026, 1, 6, 9, 0)]


def test_next_fires_alias_in_utc_after() -> None:
    got = next_fires("@weekly", BERLIN, utc(2026, 3, 2), 2)
    assert [fire.isoformat() for fire in got] == [
        "2026-03-08T00:00:00+01:00",
        "2026-03-15T00:00:00+01:00",
    ]


def test_cron_spring_forward_fixed_time_fires_once_after_gap() -> None:
    got = next_fires("30 2 * * *", BERLIN, berlin(2026, 3, 27, 12, 0), 3)
    assert [fire.isoformat() for fire in got] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist; first instant after the gap
        "2026-03-30T02:30:00+02:00",
    ]


def test_cron_fall_back_fixed_time_fires_once() -> None:
    got = next_fires("30 2 * * *", BERLIN, berlin(2026, 10, 23, 12, 0), 3)
    assert [fire.isoformat() for fire in got] == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_cron_fall_back_after_first_occurrence_does_not_repeat() -> None:
    during_repeat = utc(2026, 10, 25, 0, 45)  # 02:45 CEST, before the clocks go back
    got = next_fires("30 2 * * *", BERLIN, during_repeat, 1)
    assert [fire.isoformat() for fire in got] == ["2026-10-26T02:30:00+01:00"]


def test_cron_interval_job_keeps_rhythm_on_fall_back() -> None:
    got = next_fires("0 * * * *", BERLIN, berlin(2026, 10, 25, 0, 30), 5)
    assert [fire.isoformat() for fire in got] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
        "2026-10-25T04:00:00+01:00",
    ]
    assert steps(got) == {timedelta(hours=1)}


def test_cron_interval_job_skips_missing_hour_on_spring_forward() -> None:
    got = next_fires("*/30 * * * *", BERLIN, berlin(2026, 3, 29, 1, 0), 4)
    assert [fire.isoformat() for fire in got] == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    assert steps(got) == {timedelta(minutes=30)}


@pytest.mark.parametrize(("day", "expected"), [(SPRING, 92), (AUTUMN, 100), (date(2026, 6, 2), 96)])
def test_fires_between_over_dst_days(day: date, expected: int) -> None:
    start, end = day_bounds(day, BERLIN)
    got = fires_between("*/15 * * * *", BERLIN, start - timedelta(seconds=1), end)
    assert len(got) == expected + 1  # the next midnight is inside (start, end]
    assert steps(got) == {timedelta(minutes=15)}


def test_fires_between_is_start_exclusive_end_inclusive() -> None:
    got = fires_between("0 * * * *", BERLIN, berlin(2026, 5, 4, 9), berlin(2026, 5, 4, 12))
    assert [fire.hour for fire in got] == [10, 11, 12]


def test_fires_between_refuses_runaway() -> None:
    with pytest.raises(CronError, match="more than 10000"):
        fires_between("* * * * *", BERLIN, utc(2026, 1, 1), utc(2026, 2, 1))
    with pytest.raises(CronError, match="more than 5"):
        fires_between("* * * * *", BERLIN, utc(2026, 1, 1), utc(2026, 1, 2), limit=5)


def test_resolve_wall_time_counts_occurrences() -> None:
    assert len(resolve_wall_time(datetime(2026, 3, 29, 2, 30), BERLIN)) == 0
    assert len(resolve_wall_time(datetime(2026, 6, 1, 2, 30), BERLIN)) == 1
    first, second = resolve_wall_time(datetime(2026, 10, 25, 2, 30), BERLIN)
    assert second - first == timedelta(hours=1)


# --- describe and reschedule ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("0 9 * * 1-5", "every weekday at 09:00"),
        ("30 7 * * *", "every day at 07:30"),
        ("@daily", "every day at 00:00"),
        ("@weekly", "every Sunday at 00:00"),
        ("*/15 * * * *", "every 15 minutes"),
        ("* * * * *", "every minute"),
        ("5 * * * *", "every hour at minute 5"),
        ("15 */2 * * *", "every 2 hours at minute 15"),
        ("0 9 */3 * *", "every 3 days at 09:00"),
        ("0 8 1 * *", "on day 1 of every month at 08:00"),
        ("30 8 * * 1,3", "every Monday, Wednesday at 08:30"),
        ("0 9 * * 0,6", "every weekend day at 09:00"),
        ("0 9 * 3 1-3", "0 9 * 3 1-3"),
        ("@yearly", "@yearly"),
        ("not cron", "not cron"),
    ],
)
def test_describe(expression: str, text: str) -> None:
    assert describe(expression) == text


@pytest.mark.parametrize(
    ("expression", "directive", "result"),
    [
        ("0 9 * * 1-5", "weekly", "0 9 * * 1"),
        ("0 9 * * 3,5", "weekly", "0 9 * * 3"),
        ("15 8 * * *", "weekly", "15 8 * * 1"),
        ("0 9 1 * *", "weekly", "0 9 * * 1"),
        ("0 9 * * sun", "weekly", "0 9 * * 0"),
        ("0 9 * * 1-5", "daily", "0 9 * * *"),
        ("0 9 * * 1-5", "Daily ", "0 9 * * *"),
        ("20 9 * * 1-5", "hourly", "20 * * * *"),
        ("0 9 * * *", "weekdays", "0 9 * * 1-5"),
        ("0 9 * * *", "every 15 min", "*/15 * * * *"),
        ("0 9 * * *", "every 5 minutes", "*/5 * * * *"),
        ("0 9 * * *", "every 1 m", "* * * * *"),
        ("45 9 * * *", "every 2 h", "45 */2 * * *"),
        ("45 9 * * *", "every 6 hours", "45 */6 * * *"),
        ("45 9 * * *", "every hour", "45 * * * *"),
        ("45 9 * * *", "every 3 d", "45 9 */3 * *"),
        ("45 9 * * *", "every 2 days", "45 9 */2 * *"),
        ("0 9 * * 1-5", "at 07:30", "30 7 * * 1-5"),
        ("0 9 1 * *", "at 7:05", "5 7 1 * *"),
        ("@daily", "weekly", "0 0 * * 1"),
        ("@weekly", "daily", "0 0 * * *"),
        ("@hourly", "at 06:15", "15 6 * * *"),
        ("*/15 * * * *", "daily", "0 9 * * *"),
    ],
)
def test_reschedule(expression: str, directive: str, result: str) -> None:
    assert reschedule(expression, directive) == result


@pytest.mark.parametrize(
    ("directive", "message"),
    [
        ("every 0 min", "minutes must be 1-59"),
        ("every 90 min", "minutes must be 1-59; use 'every <n> h'"),
        ("every 24 h", "hours must be 1-23"),
        ("every 32 d", "days must be 1-31"),
        ("every -1 min", "unknown schedule directive"),
        ("every 2 weeks", "unknown schedule directive"),
        ("at 25:00", "is not a time"),
        ("at 07:60", "is not a time"),
        ("at 7am", "unknown schedule directive"),
        ("fortnightly", "use one of: daily, weekly, hourly, weekdays"),
        ("", "unknown schedule directive"),
    ],
)
def test_reschedule_refuses(directive: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        reschedule("0 9 * * 1-5", directive)


def test_reschedule_refuses_invalid_base_expression() -> None:
    with pytest.raises(CronError, match="minute must be 0-59"):
        reschedule("61 9 * * *", "daily")
