"""Pure pulse (heartbeat) timing: a fixed grid on the owner's local wall clock.

A day holds ``pulses_per_day`` evenly spaced wall-clock slots from local midnight
(12/day → 00:00, 02:00, ..., 22:00), minus quiet hours and inactive weekdays. Fixed
wall-clock slots keep pulses predictable for the owner. DST: a slot that does not exist
(spring forward) is skipped rather than moved onto the next slot, and a slot that
occurs twice (fall back) is used once, at its first occurrence. No clock is read here;
callers pass ``now``/``after``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from scheduler.cron import CronError, gap_end, resolve_wall_time, validate_timezone

__all__ = [
    "ALL_DAYS",
    "PULSES_PER_DAY",
    "PulseConfigError",
    "PulseSchedule",
    "QuietHours",
    "day_bounds",
    "grid_slots",
    "in_quiet_hours",
    "interval_minutes",
    "local_day",
    "make_schedule",
    "next_pulse",
    "parse_quiet_hours",
    "remaining_today",
    "upcoming_pulses",
]

PULSES_PER_DAY: tuple[int, ...] = (48, 24, 12, 6, 2)
ALL_DAYS: frozenset[int] = frozenset(range(7))
"""Days are numbered 0=Sunday..6=Saturday, as in the ``manage_pulse`` tool."""

_SEARCH_DAYS = 8  # a week plus one day reaches every weekday from any start
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_QUIET_KEYS = frozenset({"start", "end"})


class PulseConfigError(ValueError):
    """A pulse setting that cannot be used; the message names the bad value."""


@dataclass(frozen=True)
class QuietHours:
    """A daily local-time window without pulses; ``end`` before ``start`` spans midnight."""

    start: time
    end: time

    def contains(self, moment: time) -> bool:
        """Whether a local wall time is quiet: start inclusive, end exclusive."""
        wall = moment.replace(second=0, microsecond=0, tzinfo=None, fold=0)
        if self.start < self.end:
            return self.start <= wall < self.end
        return wall >= self.start or wall < self.end

    def as_dict(self) -> dict[str, str]:
        """The ``{"start": "HH:MM", "end": "HH:MM"}`` shape the tool and storage use."""
        return {"start": self.start.strftime("%H:%M"), "end": self.end.strftime("%H:%M")}


@dataclass(frozen=True)
class PulseSchedule:
    """A validated pulse configuration; build it with ``make_schedule``."""

    enabled: bool
    pulses_per_day: int
    active_days: frozenset[int]
    quiet_hours: tuple[QuietHours, ...]
    tz: ZoneInfo


def _parse_time(value: object, where: str) -> time:
    if not isinstance(value, str):
        raise PulseConfigError(f"{where} must be a string 'HH:MM', got {value!r}")
    match = _TIME.match(value.strip())
    if match is None:
        raise PulseConfigError(f"{where} {value!r} is not a time; use 24-hour HH:MM, e.g. 07:00")
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23:
        raise PulseConfigError(f"{where} {value!r}: hour must be 0-23")
    if minute > 59:
        raise PulseConfigError(f"{where} {value!r}: minute must be 0-59")
    return time(hour, minute)


def parse_quiet_hours(items: Sequence[Mapping[str, object]]) -> list[QuietHours]:
    """Validate ``[{"start": "HH:MM", "end": "HH:MM"}, ...]`` from the tool or storage."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise PulseConfigError('quiet_hours must be a list of {"start": "HH:MM", "end": "HH:MM"}')
    result: list[QuietHours] = []
    for index, item in enumerate(items):
        where = f"quiet_hours[{index}]"
        if not isinstance(item, Mapping):
            raise PulseConfigError(
                f'{where} must be an object {{"start": "HH:MM", "end": "HH:MM"}}'
            )
        unknown = sorted(str(key) for key in item if key not in _QUIET_KEYS)
        if unknown:
            raise PulseConfigError(f"{where} has unknown key(s) {', '.join(unknown)}")
        missing = sorted(_QUIET_KEYS - set(item))
        if missing:
            raise PulseConfigError(f"{where} is missing {' and '.join(missing)}")
        start = _parse_time(item["start"], f"{where}.start")
        end = _parse_time(item["end"], f"{where}.end")
        if start == end:
            raise PulseConfigError(f"{where} starts and ends at the same time ({item['start']})")
        result.append(QuietHours(start, end))
    return result


def in_quiet_hours(quiet_hours: Iterable[QuietHours], moment: datetime, tz: ZoneInfo) -> bool:
    """Whether an aware instant falls in any quiet window on the local clock of ``tz``."""
    wall = _aware_utc(moment, "moment").astimezone(tz).time()
    return any(window.contains(wall) for window in quiet_hours)


def _check_pulses(pulses_per_day: object) -> int:
    if (
        isinstance(pulses_per_day, bool)
        or not isinstance(pulses_per_day, int)
        or pulses_per_day not in PULSES_PER_DAY
    ):
        allowed = ", ".join(str(n) for n in PULSES_PER_DAY)
        raise PulseConfigError(f"pulses_per_day must be one of {allowed} (got {pulses_per_day!r})")
    return pulses_per_day


def _check_days(active_days: Iterable[object]) -> frozenset[int]:
    if isinstance(active_days, (str, bytes)):
        raise PulseConfigError("active_days must be a list of day numbers 0=Sunday..6=Saturday")
    days: set[int] = set()
    for day in active_days:
        if isinstance(day, bool) or not isinstance(day, int) or not 0 <= day <= 6:
            raise PulseConfigError(
                f"active_days contains {day!r}; use day numbers 0=Sunday..6=Saturday"
            )
        days.add(day)
    return frozenset(days)


def make_schedule(
    *,
    enabled: bool = True,
    pulses_per_day: int = 12,
    active_days: Iterable[int] = ALL_DAYS,
    quiet_hours: Sequence[QuietHours | Mapping[str, object]] = (),
    tz: ZoneInfo | str = "UTC",
) -> PulseSchedule:
    """Validate raw settings into a ``PulseSchedule``; an empty ``active_days`` means never."""
    windows = [item for item in quiet_hours if isinstance(item, QuietHours)]
    raw = [item for item in quiet_hours if not isinstance(item, QuietHours)]
    windows.extend(parse_quiet_hours(raw))
    if isinstance(tz, str):
        try:
            tz = validate_timezone(tz)
        except CronError as exc:
            raise PulseConfigError(str(exc)) from None
    return PulseSchedule(
        enabled=bool(enabled),
        pulses_per_day=_check_pulses(pulses_per_day),
        active_days=_check_days(active_days),
        quiet_hours=tuple(windows),
        tz=tz,
    )


def interval_minutes(pulses_per_day: int) -> int:
    """Minutes between grid slots: 1440 / pulses_per_day."""
    return 1440 // _check_pulses(pulses_per_day)


def _aware_utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def local_day(dt: datetime, tz: ZoneInfo) -> date:
    """The calendar date of an aware instant on the local clock of ``tz``."""
    return _aware_utc(dt, "dt").astimezone(tz).date()


def _first_instant(day: date, tz: ZoneInfo) -> datetime:
    wall = datetime.combine(day, time(0))
    instants = resolve_wall_time(wall, tz)
    return instants[0] if instants else gap_end(wall, tz)


def day_bounds(day: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """Local midnight to the next local midnight (half-open), as aware UTC datetimes.

    The daily pulse cap resets at local midnight; a day may be 23 or 25 hours long.
    """
    return _first_instant(day, tz), _first_instant(day + timedelta(days=1), tz)


def _cron_weekday(day: date) -> int:
    return day.isoweekday() % 7  # Monday=1 .. Saturday=6, Sunday=7 → 0


def _utc_slots(schedule: PulseSchedule, day: date) -> list[datetime]:
    if not schedule.enabled or _cron_weekday(day) not in schedule.active_days:
        return []
    step = timedelta(minutes=interval_minutes(schedule.pulses_per_day))
    midnight = datetime.combine(day, time(0))
    slots: set[datetime] = set()
    for index in range(schedule.pulses_per_day):
        wall = midnight + index * step
        if any(window.contains(wall.time()) for window in schedule.quiet_hours):
            continue
        instants = resolve_wall_time(wall, schedule.tz)
        if instants:
            slots.add(instants[0])  # first occurrence only; a gap slot is skipped
    return sorted(slots)


def grid_slots(schedule: PulseSchedule, day: date) -> list[datetime]:
    """That local day's pulse slots as aware datetimes in ``schedule.tz``, ascending."""
    return [slot.astimezone(schedule.tz) for slot in _utc_slots(schedule, day)]


def next_pulse(schedule: PulseSchedule, after: datetime) -> datetime | None:
    """The first slot strictly after ``after`` within eight days, or None."""
    after_utc = _aware_utc(after, "after")
    if not schedule.enabled or not schedule.active_days:
        return None
    first = local_day(after_utc, schedule.tz)
    for offset in range(_SEARCH_DAYS + 1):
        for slot in _utc_slots(schedule, first + timedelta(days=offset)):
            if slot > after_utc:
                return slot.astimezone(schedule.tz)
    return None


def upcoming_pulses(schedule: PulseSchedule, after: datetime, until: datetime) -> list[datetime]:
    """All slots in ``(after, until]``, ascending, in ``schedule.tz``."""
    after_utc, until_utc = _aware_utc(after, "after"), _aware_utc(until, "until")
    if not schedule.enabled or until_utc <= after_utc:
        return []
    day, last = local_day(after_utc, schedule.tz), local_day(until_utc, schedule.tz)
    slots: list[datetime] = []
    while day <= last:
        slots.extend(s for s in _utc_slots(schedule, day) if after_utc < s <= until_utc)
        day += timedelta(days=1)
    return [slot.astimezone(schedule.tz) for slot in slots]


def remaining_today(schedule: PulseSchedule, done_today: int, now: datetime) -> int:
    """Pulses still allowed today: the daily cap left, bounded by the slots left after now."""
    now_utc = _aware_utc(now, "now")
    slots = _utc_slots(schedule, local_day(now_utc, schedule.tz))
    left_in_grid = sum(1 for slot in slots if slot > now_utc)
    return max(0, min(schedule.pulses_per_day - done_today, left_in_grid))
