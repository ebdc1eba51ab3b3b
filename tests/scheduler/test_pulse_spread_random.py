"""Property-style checks of the pulse grid over many random settings (fixed seed).

For any count 1-48 and random quiet windows: slots are unique, ascending, on whole
minutes, never in quiet hours, and there are min(n, active minutes) of them on a day
without a DST change; they sit where ``floor(i * A / n)`` along the active timeline puts
them. On DST days the first three properties still hold.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from scheduler.pulse.grid import (
    PulseSchedule,
    QuietHours,
    day_bounds,
    grid_slots,
    in_quiet_hours,
    make_schedule,
    next_pulse,
    upcoming_pulses,
)
from tests.fakes.clock import BERLIN

ZONES = [ZoneInfo(k) for k in ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")]
DST_DAYS = [
    (BERLIN, date(2026, 3, 29)),
    (BERLIN, date(2026, 10, 25)),
    (ZoneInfo("America/New_York"), date(2026, 3, 8)),
    (ZoneInfo("America/New_York"), date(2026, 11, 1)),
]
RUNS = 300


def _random_schedule(rng: random.Random, tz: ZoneInfo) -> PulseSchedule:
    windows = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        start = rng.randrange(1440)
        length = rng.choice([rng.randrange(1, 1439), rng.randrange(1, 120)])
        end = (start + length) % 1440
        windows.append(QuietHours(time(start // 60, start % 60), time(end // 60, end % 60)))
    return make_schedule(pulses_per_day=rng.randint(1, 48), quiet_hours=windows, tz=tz)


def _active(schedule: PulseSchedule) -> list[int]:
    """The oracle: every minute of a day against every window, start in, end out."""
    spans = [
        (w.start.hour * 60 + w.start.minute, w.end.hour * 60 + w.end.minute)
        for w in schedule.quiet_hours
    ]
    return [
        m
        for m in range(1440)
        if not any((a <= m < b) if a < b else (m >= a or m < b) for a, b in spans)
    ]


def _check_common(schedule: PulseSchedule, slots: list[datetime]) -> None:
    instants = [slot.astimezone(UTC) for slot in slots]
    assert instants == sorted(set(instants))
    assert all(slot.second == 0 and slot.microsecond == 0 for slot in slots)
    assert not any(in_quiet_hours(schedule.quiet_hours, slot, schedule.tz) for slot in slots)


def test_random_settings_on_ordinary_days() -> None:
    rng = random.Random(20260504)
    for _ in range(RUNS):
        tz = rng.choice(ZONES)
        day = date(2026, 6, 1) + timedelta(days=rng.randrange(90))  # no DST change here
        start, end = day_bounds(day, tz)
        assert end - start == timedelta(hours=24)
        schedule = _random_schedule(rng, tz)
        slots = grid_slots(schedule, day)
        _check_common(schedule, slots)
        active, n = _active(schedule), schedule.pulses_per_day
        assert len(slots) == min(n, len(active))
        expected = [active[i * len(active) // len(slots)] for i in range(len(slots))]
        assert [s.hour * 60 + s.minute for s in slots] == expected
        assert all(slot.date() == day and slot.tzinfo is tz for slot in slots)
        if slots:
            assert next_pulse(schedule, start - timedelta(seconds=1)) == slots[0]
            assert (
                upcoming_pulses(schedule, start - timedelta(seconds=1), end - timedelta(seconds=1))
                == slots
            )


def test_random_settings_on_dst_days() -> None:
    rng = random.Random(7)
    for _ in range(RUNS):
        tz, day = rng.choice(DST_DAYS)
        schedule = _random_schedule(rng, tz)
        slots = grid_slots(schedule, day)
        _check_common(schedule, slots)
        assert len(slots) <= min(schedule.pulses_per_day, len(_active(schedule)))
        start, end = day_bounds(day, tz)
        assert all(start <= slot < end for slot in slots)
        if not schedule.quiet_hours:
            assert len(slots) == schedule.pulses_per_day  # nothing lost to the gap
