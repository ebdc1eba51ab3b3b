"""Pure cron timing: validation, next fires across DST, and the words for schedules
(describe and reschedule).

Every test uses fixed datetimes; nothing reads the clock or sleeps.
"""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta

import pytest

from scheduler.cron.expression import (
    CronError,
    describe,
    fires_between,
    next_fires,
    reschedule,
    resolve_wall_time,
    validate_cron,
    validate_timezone,
)
from scheduler.pulse.grid import day_bounds
from tests.scheduler.timing_kit import AUTUMN, BERLIN, SPRING, berlin, steps, utc


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
