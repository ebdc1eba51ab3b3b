"""Pure pulse (heartbeat) timing: slots spread evenly over the waking part of a local day.

The active timeline of a local day is its wall-clock minutes 00:00..23:59 minus the quiet
windows (start inclusive, end exclusive; a window may cross midnight, windows may
overlap). With ``A`` active minutes and ``n`` pulses, slot ``i`` sits at the whole minute
``floor(i * A / n)`` along that timeline: no quiet hours and 12/day gives 00:00, 02:00,
..., 22:00; quiet 22:00-07:00 and 12/day gives 07:00, 08:15, ..., 20:45. With more pulses
than active minutes each active minute is used once. Inactive weekdays have no slots.

DST: slots are wall-clock minutes. A slot inside a spring-forward gap is moved to the
gap end, or, when a slot already sits there, to the next free active minute of that day
(dropped only when none is left); a wall time that occurs twice (fall back) is used
once, at its first occurrence. No clock is read here; callers pass ``now``/``after``.
Day grids are cached per (schedule, day): both are immutable.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo

from scheduler.cron.expression import CronError, gap_end, resolve_wall_time, validate_timezone

__all__ = [
    "ALL_DAYS",
    "MAX_PULSES",
    "MIN_PULSES",
    "PULSES_PER_DAY",
    "PulseConfigError",
    "PulseSchedule",
    "QuietHours",
    "active_spans",
    "average_spacing",
    "day_bounds",
    "grid_slots",
    "in_quiet_hours",
    "local_day",
    "make_schedule",
    "next_pulse",
    "parse_quiet_hours",
    "remaining_today",
    "upcoming_pulses",
]

MIN_PULSES: Final = 1
MAX_PULSES: Final = 48
PULSES_PER_DAY: Final = range(MIN_PULSES, MAX_PULSES + 1)
"""Every allowed ``pulses_per_day`` (``n in PULSES_PER_DAY`` checks a count)."""
ALL_DAYS: frozenset[int] = frozenset(range(7))
"""Days are numbered 0=Sunday..6=Saturday, as in the ``manage_pulse`` tool."""

_DAY_MINUTES = 24 * 60
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


DEFAULT_QUIET: tuple[QuietHours, ...] = (QuietHours(time(22, 0), time(7, 0)),)
"""The owner's quiet hours until they set their own (``manage_settings``)."""


@dataclass(frozen=True)
class PulseSchedule:
    """A validated pulse configuration; build it with ``make_schedule``."""

    enabled: bool
    pulses_per_day: int
    active_days: frozenset[int]
    quiet_hours: tuple[QuietHours, ...]
    tz: ZoneInfo
    paused_until: datetime | None = None
    """No pulse before this moment (``manage_pulse``'s ``paused_until``); None: not paused."""


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
        raise PulseConfigError(
            f"pulses_per_day must be a whole number from {MIN_PULSES} to {MAX_PULSES} "
            f"(got {pulses_per_day!r})"
        )
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
    paused_until: datetime | None = None,
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
        paused_until=None if paused_until is None else _aware_utc(paused_until, "paused_until"),
    )


# --- the active timeline -------------------------------------------------------------
def _minute_of(moment: time) -> int:
    return moment.hour * 60 + moment.minute


@lru_cache(maxsize=64)
def _active_minutes(quiet_hours: tuple[QuietHours, ...]) -> tuple[int, ...]:
    """The minutes of a day (0..1439) outside every quiet window, ascending."""
    quiet = bytearray(_DAY_MINUTES)
    for window in quiet_hours:
        start, end = _minute_of(window.start), _minute_of(window.end)
        if start < end:
            quiet[start:end] = b"\x01" * (end - start)
        else:  # crosses midnight (start == end would be the whole day, as in ``contains``)
            quiet[start:] = b"\x01" * (_DAY_MINUTES - start)
            quiet[:end] = b"\x01" * end
    return tuple(minute for minute in range(_DAY_MINUTES) if not quiet[minute])


def active_spans(quiet_hours: Iterable[QuietHours]) -> list[tuple[str, str]]:
    """The active parts of a day as ``("HH:MM", "HH:MM")`` half-open spans from 00:00;
    the end of the day reads ``24:00``. No quiet hours → ``[("00:00", "24:00")]``."""
    return list(_spans(tuple(quiet_hours)))


@lru_cache(maxsize=64)
def _spans(quiet_hours: tuple[QuietHours, ...]) -> tuple[tuple[str, str], ...]:
    """``active_spans``, once per set of quiet hours (every prompt's pulse line asks)."""
    spans: list[tuple[str, str]] = []
    start = previous = None
    for minute in (*_active_minutes(quiet_hours), None):
        if minute is not None and previous is not None and minute == previous + 1:
            previous = minute
            continue
        if start is not None and previous is not None:
            spans.append((_hhmm(start), _hhmm(previous + 1)))
        start = previous = minute
    return tuple(spans)


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def average_spacing(schedule: PulseSchedule) -> timedelta | None:
    """The time between neighbouring slots inside the active part of a day (active
    minutes / pulses, at least a minute; slots sit on whole minutes, so a gap may be
    up to a minute shorter); None when every minute is quiet."""
    active = len(_active_minutes(schedule.quiet_hours))
    if active == 0:
        return None
    return timedelta(minutes=active / min(schedule.pulses_per_day, active))


# --- days and instants ---------------------------------------------------------------
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


def _place(wanted: list[int], active: tuple[int, ...], day: date, tz: ZoneInfo) -> list[datetime]:
    """UTC instants for the wanted wall minutes of ``day``: first occurrence of a folded
    time; a minute in a DST gap moves to the gap end or the next free active minute."""
    first, last = day_bounds(day, tz)
    if last - first == timedelta(days=1) and first.astimezone(tz).time() == time(0):
        return [first + timedelta(minutes=minute) for minute in wanted]  # no DST change
    midnight = datetime.combine(day, time(0))
    placed: dict[int, datetime] = {}
    in_gap: list[int] = []
    for minute in wanted:
        instants = resolve_wall_time(midnight + timedelta(minutes=minute), tz)
        if instants:
            placed[minute] = instants[0]
        else:
            in_gap.append(minute)
    for minute in in_gap:
        end = gap_end(midnight + timedelta(minutes=minute), tz).astimezone(tz)
        if end.date() != day:
            continue  # the gap runs past midnight: nothing of this day is left after it
        start = _minute_of(end.time()) + (1 if end.second or end.microsecond else 0)
        for candidate in active[bisect_left(active, start) :]:
            if candidate in placed:
                continue
            instants = resolve_wall_time(midnight + timedelta(minutes=candidate), tz)
            if instants:
                placed[candidate] = instants[0]
                break
    return sorted(placed.values())


@lru_cache(maxsize=1024)
def _utc_slots(schedule: PulseSchedule, day: date) -> tuple[datetime, ...]:
    if not schedule.enabled or _cron_weekday(day) not in schedule.active_days:
        return ()
    active = _active_minutes(schedule.quiet_hours)
    count = min(schedule.pulses_per_day, len(active))
    wanted = [active[index * len(active) // count] for index in range(count)]
    slots = tuple(_place(wanted, active, day, schedule.tz))
    if schedule.paused_until is None:
        return slots
    return tuple(slot for slot in slots if slot >= schedule.paused_until)


def grid_slots(schedule: PulseSchedule, day: date) -> list[datetime]:
    """That local day's pulse slots as aware datetimes in ``schedule.tz``, ascending."""
    return [slot.astimezone(schedule.tz) for slot in _utc_slots(schedule, day)]


def next_pulse(schedule: PulseSchedule, after: datetime) -> datetime | None:
    """The first slot strictly after ``after`` within eight days, or None."""
    after_utc = _aware_utc(after, "after")
    if not schedule.enabled or not schedule.active_days:
        return None
    if schedule.paused_until is not None:  # a pause of weeks: search from its end
        after_utc = max(after_utc, schedule.paused_until - timedelta(microseconds=1))
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
