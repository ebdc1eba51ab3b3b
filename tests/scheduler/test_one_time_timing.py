"""One-time job times (``scheduler.cron.job``) and cron syntax that would not repeat itself."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.cron.expression import CronError, describe, next_fires, reschedule, validate_cron
from scheduler.cron.job import JobError, one_time_at, parse_run_at
from tests.fakes.clock import BERLIN

NOW = datetime(2026, 11, 26, 13, 5, 30, tzinfo=UTC)  # Thursday 14:05:30 in Berlin


def test_naive_run_at_is_the_owners_wall_time() -> None:
    when = one_time_at("2026-11-27T08:00", None, BERLIN, NOW)  # "tomorrow at 8"
    assert when == datetime(2026, 11, 27, 7, 0, tzinfo=UTC)
    assert when.isoformat() == "2026-11-27T08:00:00+01:00"


@pytest.mark.parametrize(
    ("text", "utc_hour"),
    [("2026-11-27T08:00:00+01:00", 7), ("2026-11-27T08:00Z", 8), ("2026-11-27 08:00:15", 7)],
)
def test_run_at_with_seconds_or_offset(text: str, utc_hour: int) -> None:
    assert one_time_at(text, None, BERLIN, NOW).astimezone(UTC).hour == utc_hour


def test_in_minutes_counts_from_now() -> None:
    assert one_time_at(None, 20, BERLIN, NOW) == datetime(2026, 11, 26, 13, 25, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("run_at", "in_minutes", "message"),
    [
        (
            "2026-11-26T14:00",
            None,
            "run_at 2026-11-26T14:00+01:00 is in the past; "
            "it is now 2026-11-26T14:05+01:00 (Europe/Berlin)",
        ),
        (
            None,
            0,
            "in_minutes 0 is in the past; it must be at least 1; "
            "it is now 2026-11-26T14:05+01:00 (Europe/Berlin)",
        ),
        (None, 600_000, "more than a year"),
        ("2028-01-01T08:00", None, "more than a year ahead"),
        ("2026-11-27", None, "needs a date and a time of day"),
        ("tomorrow at 8", None, "needs a date and a time of day"),
        ("2026-11-27T25:00", None, "is not an ISO 8601 time"),
    ],
)
def test_bad_times_are_refused_with_the_local_time(
    run_at: str | None, in_minutes: int | None, message: str
) -> None:
    with pytest.raises(JobError) as caught:
        one_time_at(run_at, in_minutes, BERLIN, NOW)
    assert message in str(caught.value)


def test_a_wall_time_in_the_spring_gap_runs_when_the_gap_ends() -> None:
    at = parse_run_at("2026-03-29T02:30", BERLIN)
    assert at.astimezone(UTC) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST


@pytest.mark.parametrize(
    ("expression", "letter", "field"),
    [
        ("R 9 * * *", "'R' (random)", "minute"),
        ("r 9 * * *", "'R' (random)", "minute"),
        ("0 R * * *", "'R' (random)", "hour"),
        ("R/5 * * * *", "'R' (random)", "minute"),
        ("R(0-29) 9 * * *", "'R' (random)", "minute"),
        ("H 9 * * *", "'H' (hashed)", "minute"),
        ("H(0-29) 9 * * *", "'H' (hashed)", "minute"),
        ("0 9 * * H", "'H' (hashed)", "day-of-week"),
        ("5,R 9 * * *", "'R' (random)", "minute"),
    ],
)
def test_nondeterministic_syntax_is_refused(expression: str, letter: str, field: str) -> None:
    with pytest.raises(CronError) as caught:
        validate_cron(expression)
    text = str(caught.value)
    assert f"{letter} is not supported (in the {field} field): choose a fixed {field}" in text


def test_names_with_h_or_r_are_still_fine() -> None:
    assert validate_cron("0 9 * mar thu") == "0 9 * mar thu"
    assert validate_cron("0 9 * * thu,fri") == "0 9 * * thu,fri"


def test_every_weekday_at_9() -> None:
    expression = validate_cron("0 9 * * 1-5")
    assert describe(expression) == "every weekday at 09:00"
    fires = next_fires(expression, BERLIN, NOW, 2)
    assert [f.isoformat() for f in fires] == [
        "2026-11-27T09:00:00+01:00",
        "2026-11-30T09:00:00+01:00",
    ]


def test_reply_directives_never_build_random_expressions() -> None:
    with pytest.raises(CronError, match="not supported"):
        reschedule("R 9 * * *", "weekly")
    assert reschedule("0 9 * * 1-5", "at 07:30") == "30 7 * * 1-5"
