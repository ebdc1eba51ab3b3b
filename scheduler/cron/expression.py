"""Cron expressions: validation, next fires across DST, and the expression in words.

Everything here is a function of its arguments (no clock, no I/O) so the scheduler,
the tools and the ``schedule`` command all agree on when a job fires. ``describe``
says an expression for people; ``reschedule`` rewrites one from a reply directive
("weekly", "every 2h", "at 07:30").

Day fields follow cron's rule: when day-of-month and day-of-week are both restricted
(``0 17 25-31 * 5``), a day matching either one fires. Such an expression is accepted
(it is valid cron, and sometimes meant), but ``day_rule_warning`` says so plainly, and
``describe`` describes it that way. A field croniter cannot read is refused with the
field named and forms that work (``5L`` for "last Friday": croniter writes ``L5``).

DST policy, computed on the local wall clock and resolved with zoneinfo ``fold``:

* A wall time that occurs twice (autumn fall-back) fires once, at its first occurrence,
  unless the job's minute or hour field starts with ``*`` (an interval job such as
  ``*/15 * * * *`` or ``0 * * * *``): those keep their rhythm and fire at both.
* A wall time that does not exist (spring forward) is skipped by interval jobs (the hour
  simply is not there) and fires a fixed-time job once, at the first instant after the
  gap (``30 2 * * *`` in Europe/Berlin fires at 03:00 CEST on that day), like cronie.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "MAX_FIRES",
    "CronError",
    "day_rule_warning",
    "describe",
    "fires_between",
    "gap_end",
    "next_fires",
    "reschedule",
    "resolve_wall_time",
    "validate_cron",
    "validate_timezone",
]

MAX_FIRES = 10_000
"""Upper bound on fires returned by one ``fires_between`` call (runaway guard)."""

ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "@hourly": "0 * * * *",
        "@daily": "0 0 * * *",
        "@weekly": "0 0 * * 0",
        "@monthly": "0 0 1 * *",
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
    }
)

# name, low, high (day-of-week accepts 7 as Sunday, like every cron)
_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_TOKEN = re.compile(r"^(\*|\d+|[a-z]{3})(?:-(\d+|[a-z]{3}))?(?:/(\d+))?$", re.IGNORECASE)
_FIELD_HELP = "minute hour day-of-month month day-of-week"
# croniter's random (R) and hashed (H) forms: a new minute on every computation, or one
# that depends on a hash id; the scheduler needs the same fires everywhere, every time.
_NONDETERMINISTIC = re.compile(r"^([hr])(?![a-z])", re.IGNORECASE)
_FIXED_EXAMPLES = ("'17 9 * * *'", "'0 9 * * *'", "'0 9 1 * *'", "'0 9 1 1 *'", "'0 9 * * 1'")
# Walls this far before ``after`` are examined too: a gap can move a fire later.
_LOOKBACK = timedelta(hours=3)


class CronError(ValueError):
    """A cron expression, timezone or schedule directive that cannot be used."""


def validate_timezone(name: str) -> ZoneInfo:
    """Return the IANA zone, or a CronError that names the bad value."""
    if not isinstance(name, str) or not name.strip():
        raise CronError("timezone is empty; use an IANA name such as 'Europe/Berlin' or 'UTC'")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(
            f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'"
        ) from None


def _invalid(expression: str, reason: str) -> CronError:
    return CronError(f"cron expression {expression!r} is invalid: {reason}")


def name_value(token: str, index: int) -> int | None:
    names = _MONTHS if index == 3 else _DAYS if index == 4 else ()
    low = token.lower()
    if low in names:
        return names.index(low) + (1 if index == 3 else 0)
    return None


def _check_field(expression: str, index: int, field: str) -> None:
    """Range-check the plain parts of one field so the message names the field."""
    name, low, high = _FIELDS[index]
    for item in field.split(","):
        match = _TOKEN.match(item)
        if match is None:
            continue  # L, W, # and friends: croniter judges those
        for token in (match.group(1), match.group(2)):
            if token is None or token == "*":
                continue
            if token.isdigit():
                value = int(token)
                if not low <= value <= high:
                    raise _invalid(expression, f"{name} must be {low}-{high} (got {value})")
            elif name_value(token, index) is None:
                raise _invalid(expression, f"{token!r} is not a valid {name}")
        step = match.group(3)
        if step is not None and not 1 <= int(step) <= high:
            raise _invalid(expression, f"{name} step must be 1-{high} (got {int(step)})")


def _refuse_nondeterministic(expression: str, fields: list[str]) -> None:
    for index, field in enumerate(fields):
        for item in field.split(","):
            found = _NONDETERMINISTIC.match(item)
            if found is None:
                continue
            letter = found.group(1).upper()
            kind = "random" if letter == "R" else "hashed"
            example = _FIXED_EXAMPLES[index]
            field_name = _FIELDS[index][0]
            raise _invalid(
                expression,
                f"{letter!r} ({kind}) is not supported (in the {field_name} field): "
                f"choose a fixed {field_name}, e.g. {example}",
            )


def _clean_croniter_message(message: str) -> str:
    """Drop croniter's echo of the expression and its boilerplate, keep the reason."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", message).strip()
    text = re.sub(r"^(is )?not acceptable[.,]?\s*", "", text, flags=re.IGNORECASE)
    text = text.replace("day_of_week", "day-of-week").replace("day_of_month", "day-of-month")
    return text or "unsupported syntax in one of the fields"


_FIELD_FORMS = (
    "a number 0-59, a list (0,30), a range (0-10) or a step (*/15)",
    "a number 0-23, a list (8,20), a range (9-17) or a step (*/2)",
    "a number 1-31, a list (1,15), a range (1-7), a step (*/2), L (the last day) or 15W "
    "(the weekday nearest the 15th)",
    "a number 1-12 or jan-dec, a list (1,7), a range (1-3) or a step (*/3)",
    "0-7 or sun-sat (0 and 7 are Sunday), a list (mon,wed), a range (1-5), 5#3 (the third "
    "Friday) or L5 (the last Friday)",
)
"""What each field accepts, in the order of ``_FIELDS``: said when a field is refused."""
_LAST_WEEKDAY = re.compile(r"^(\d|sun|mon|tue|wed|thu|fri|sat)l$", re.IGNORECASE)


def _field_at_fault(fields: list[str]) -> int | None:
    """The first field croniter refuses on its own (the others plain), if any."""
    from croniter import CroniterError, croniter  # see ``validate_cron``

    for index, field in enumerate(fields):
        probe = ["0", "0", "*", "*", "*"]
        probe[index] = field
        try:
            croniter.expand(" ".join(probe))
        except (CroniterError, ValueError, TypeError):
            return index
    return None


def _refused_field(expression: str, fields: list[str], index: int) -> CronError:
    """A refusal that names the field and says what would work there."""
    name, field = _FIELDS[index][0], fields[index]
    last = _LAST_WEEKDAY.match(field) if index == 4 else None
    if last is not None:
        token = last.group(1)
        value = int(token) if token.isdigit() else name_value(token, 4)
        day = _DAY_NAMES[(value or 0) % 7]
        number = (value or 0) % 7
        minute, hour, dom, month = fields[:4]
        return _invalid(
            expression,
            f"the {name} field {field!r} is not supported. For the last {day} of the "
            f"month write L{number}: '{minute} {hour} {dom} {month} L{number}'; or run "
            f"every {day} ('{minute} {hour} * {month} {number}') and have the instruction "
            f"check that it is the last {day} of the month (no {day} 7 days later)",
        )
    return _invalid(
        expression,
        f"the {name} field {field!r} is not supported syntax; use {_FIELD_FORMS[index]}",
    )


def validate_cron(expression: str) -> str:
    """Check a five-field expression or alias and return it with whitespace collapsed.

    Six- and seven-field (seconds, year) forms are refused: the scheduler works in minutes.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise CronError(f"cron expression is empty; use five fields: {_FIELD_HELP}")
    fields = expression.split()
    normalised = " ".join(fields)
    if normalised.startswith("@"):
        alias = normalised.lower()
        if alias not in ALIASES:
            known = ", ".join(ALIASES)
            raise _invalid(expression, f"unknown alias; use one of {known}")
        return alias
    if len(fields) != 5:
        hint = "; seconds are not supported" if len(fields) in (6, 7) else ""
        raise _invalid(
            expression,
            f"expected 5 fields ({_FIELD_HELP}), got {len(fields)}{hint}, e.g. '0 9 * * 1-5'",
        )
    # croniter (with dateutil and ctypes, about 1 MiB) is imported on the first
    # expression checked or walked: an agent without jobs never needs it.
    from croniter import CroniterBadDateError, CroniterError, croniter

    _refuse_nondeterministic(expression, fields)
    for index, field in enumerate(fields):
        _check_field(expression, index, field)
    try:
        croniter.expand(normalised)
        croniter(normalised, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise _invalid(expression, "it never fires (no such date)") from None
    except (CroniterError, ValueError, TypeError) as exc:
        at_fault = _field_at_fault(fields)
        if at_fault is not None:
            raise _refused_field(expression, fields, at_fault) from exc
        raise _invalid(expression, _clean_croniter_message(str(exc))) from exc
    return normalised


def expand(expression: str) -> str:
    normalised = validate_cron(expression)
    return ALIASES.get(normalised, normalised)


# --- wall clock resolution ---------------------------------------------------------


def _exists(wall: datetime, tz: ZoneInfo, fold: int) -> bool:
    local = wall.replace(tzinfo=tz, fold=fold)
    return local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall


def resolve_wall_time(wall: datetime, tz: ZoneInfo) -> tuple[datetime, ...]:
    """UTC instants at which a naive local wall time occurs: 0 (gap), 1, or 2 (fold)."""
    naive = wall.replace(tzinfo=None, fold=0)
    first = _exists(naive, tz, 0)
    second = _exists(naive, tz, 1)
    instants = [
        naive.replace(tzinfo=tz, fold=fold).astimezone(UTC)
        for fold, ok in ((0, first), (1, second))
        if ok
    ]
    return tuple(sorted(set(instants)))


def gap_end(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a DST gap ends, for a wall time inside that gap."""
    naive = wall.replace(tzinfo=None, fold=0)
    low = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)  # before the transition
    high = naive.replace(tzinfo=tz, fold=0).astimezone(UTC)  # after it
    after_offset = high.astimezone(tz).utcoffset()
    if low >= high or low.astimezone(tz).utcoffset() == after_offset:
        return high  # not in a gap
    lo_s, hi_s = int(low.timestamp()), int(high.timestamp())
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(tz).utcoffset() == after_offset:
            hi_s = mid
        else:
            lo_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


# --- next fires --------------------------------------------------------------------


def _require_aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def _iter_fires(expression: str, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """``_iter_expanded`` of an expression checked here first."""
    return _iter_expanded(expand(expression), tz, after)


def _iter_expanded(expanded: str, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Yield UTC fire instants strictly after ``after``, ascending and unique, for an
    expression already checked and expanded (``expand``).

    Wall times come from croniter on a DST-free clock; each is then resolved in ``tz``.
    Second occurrences of folded times wait in a heap until a later instant is seen,
    which is all the reordering DST can cause.
    """
    from croniter import croniter  # see ``validate_cron``

    minute, hour = expanded.split()[:2]
    interval_job = minute.startswith("*") or hour.startswith("*")
    after_utc = _require_aware(after, "after")
    start_wall = (after_utc - _LOOKBACK).astimezone(tz).replace(tzinfo=None)
    walls = croniter(expanded, start_wall.replace(tzinfo=UTC))
    pending: list[datetime] = []
    last: datetime | None = None
    while True:
        wall = walls.get_next(datetime).replace(tzinfo=None)
        instants = resolve_wall_time(wall, tz)
        if not instants:
            if interval_job:
                continue
            instants = (gap_end(wall, tz),)
        current = instants[0]
        if interval_job and len(instants) > 1:
            heapq.heappush(pending, instants[1])
        while pending and pending[0] <= current:
            candidate = heapq.heappop(pending)
            if candidate > after_utc and (last is None or candidate > last):
                last = candidate
                yield candidate
        if current > after_utc and (last is None or current > last):
            last = current
            yield current


def next_fires(expression: str, tz: ZoneInfo, after: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` fire times strictly after ``after``, as aware datetimes in ``tz``."""
    if count < 0:
        raise ValueError("count must not be negative")
    fires: list[datetime] = []
    if count == 0:
        expand(expression)
        return fires
    for instant in _iter_fires(expression, tz, after):
        fires.append(instant.astimezone(tz))
        if len(fires) >= count:
            break
    return fires


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule checked once (``Schedule.of``), so asking for its next fires
    does not check the expression and the zone again: a stored job's schedule is read
    once, at its store, and each fire only computes."""

    expression: str
    """As written (normalised by ``validate_cron``)."""
    expanded: str
    """Aliases such as ``@daily`` spelled out in five fields."""
    tz: ZoneInfo

    @classmethod
    def of(cls, expression: str, timezone: str) -> Schedule:
        """The schedule, or a CronError that says what is wrong with it."""
        written = validate_cron(expression)
        return cls(written, ALIASES.get(written, written), validate_timezone(timezone))

    def words(self) -> str:
        """``describe`` of the expression (checked already)."""
        return _describe(self.expression)

    def next_fires(self, after: datetime, count: int = 3) -> list[datetime]:
        """The next ``count`` fire times strictly after ``after``, aware, in ``tz``."""
        fires: list[datetime] = []
        if count <= 0:
            return fires
        for instant in _iter_expanded(self.expanded, self.tz, after):
            fires.append(instant.astimezone(self.tz))
            if len(fires) >= count:
                break
        return fires


def fires_between(
    expression: str, tz: ZoneInfo, start: datetime, end: datetime, *, limit: int = MAX_FIRES
) -> list[datetime]:
    """Fire times in ``(start, end]`` in ``tz``; refuses more than ``limit`` of them."""
    end_utc = _require_aware(end, "end")
    fires: list[datetime] = []
    for instant in _iter_fires(expression, tz, start):
        if instant > end_utc:
            break
        if len(fires) >= limit:
            raise CronError(
                f"cron expression {expression!r} fires more than {limit} times in that window"
            )
        fires.append(instant.astimezone(tz))
    return fires


# --- description -------------------------------------------------------------------


# --- in words --------------------------------------------------------------------

_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def _clock(hour: str, minute: str) -> str:
    return f"{int(hour):02d}:{int(minute):02d}"


def _day_list(field: str) -> str | None:
    special = {"1-5": "weekday", "mon-fri": "weekday", "0,6": "weekend day", "6,0": "weekend day"}
    if field.lower() in special:
        return special[field.lower()]
    names: list[str] = []
    for item in field.split(","):
        value = int(item) if item.isdigit() else name_value(item, 4)
        if value is None or value > 7:
            return None
        names.append(_DAY_NAMES[value % 7])
    return ", ".join(names)


_ANY_DAY = ("*", "?")
_NTH = ("1st", "2nd", "3rd", "4th", "5th")
_WEEK_OF_MONTH: Mapping[str, str] = MappingProxyType(
    {"1-7": "#1", "8-14": "#2", "15-21": "#3", "22-28": "#4", "24-31": "L", "25-31": "L"}
)
"""Day-of-month ranges that, next to one weekday, most likely meant its nth or last one."""


def day_rule_warning(expression: str) -> str | None:
    """A plain warning when both day fields are restricted (cron's OR rule), else None.

    ``0 17 25-31 * 5`` runs on every day from the 25th to the 31st and on every Friday,
    not only on Fridays from the 25th: say so, and what would do the likely intent.
    """
    try:
        minute, hour, dom, month, dow = expand(expression).split()
    except CronError:
        return None
    if dom in _ANY_DAY or dow in _ANY_DAY:
        return None
    days = _day_list(dow)
    on_days = f"every {days}" if days else f"day-of-week {dow}"
    text = (
        f"cron's OR rule: with both day fields set, this runs on {_month_days(dom)} "
        f"and also on {on_days}, not only on days matching both. To need both, keep only "
        f"day-of-week ('{minute} {hour} * {month} {dow}') and have the instruction check "
        "the date."
    )
    week = _WEEK_OF_MONTH.get(dom)
    single = int(dow) if dow.isdigit() else name_value(dow, 4)
    if week is not None and single is not None and days is not None:
        number = single % 7
        nth = f"L{number}" if week == "L" else f"{number}#{week[1]}"
        which = "last" if week == "L" else _NTH[int(week[1]) - 1]
        text += f" The {which} {days} of each month is '{minute} {hour} * {month} {nth}'."
    return text


def _month_days(dom: str) -> str:
    """``15`` -> "day 15 of the month", ``25-31`` -> "days 25-31 of the month"."""
    return f"day {dom} of the month" if dom.isdigit() else f"days {dom} of the month"


def _special_days(dom: str, dow: str) -> str | None:
    """``L`` (last day), ``L5`` (last Friday), ``5#3`` (third Friday), each alone."""
    if dom == "L" and dow in _ANY_DAY:
        return "on the last day of every month"
    if dom not in _ANY_DAY:
        return None
    last = re.fullmatch(r"[lL]([0-7])", dow)
    if last:
        return f"on the last {_DAY_NAMES[int(last.group(1)) % 7]} of every month"
    nth = re.fullmatch(r"([0-7])#([1-5])", dow)
    if nth:
        day = _DAY_NAMES[int(nth.group(1)) % 7]
        return f"on the {_NTH[int(nth.group(2)) - 1]} {day} of every month"
    return None


def describe(expression: str) -> str:
    """Short English for common shapes; any other expression is returned as written,
    with cron's OR rule spelled out when both day fields are restricted."""
    try:
        written = validate_cron(expression)
    except CronError:
        return expression
    return _describe(written)


def _describe(written: str) -> str:
    """``describe`` of an expression already checked (``validate_cron``)."""
    expanded = ALIASES.get(written, written)
    minute, hour, dom, month, dow = ("*" if field == "?" else field for field in expanded.split())
    if dom != "*" and dow != "*":
        listed = _day_list(dow)
        either = f"every {listed}" if listed else f"day-of-week {dow}"
        at = f" at {_clock(hour, minute)}" if hour.isdigit() and minute.isdigit() else ""
        return (
            f"{written}: on {_month_days(dom)} and also on {either}{at} "
            "(cron's OR rule: either day matches)"
        )
    special = _special_days(dom, dow)
    if special and month == "*" and hour.isdigit() and minute.isdigit():
        return f"{special} at {_clock(hour, minute)}"
    every = re.fullmatch(r"\*/(\d+)", minute)
    if (hour, dom, month, dow) == ("*", "*", "*", "*"):
        if minute == "*":
            return "every minute"
        if every:
            return f"every {every.group(1)} minutes"
        if minute.isdigit():
            return f"every hour at minute {int(minute)}"
        return written
    if not minute.isdigit():
        return written
    hours = re.fullmatch(r"\*/(\d+)", hour)
    if hours and (dom, month, dow) == ("*", "*", "*"):
        return f"every {hours.group(1)} hours at minute {int(minute)}"
    if not hour.isdigit():
        return written
    at = _clock(hour, minute)
    days = re.fullmatch(r"\*/(\d+)", dom)
    if month != "*":
        return written
    if (dom, dow) == ("*", "*"):
        return f"every day at {at}"
    if days and dow == "*":
        return f"every {days.group(1)} days at {at}"
    if dom.isdigit() and dow == "*":
        return f"on day {int(dom)} of every month at {at}"
    day_list = _day_list(dow) if dom == "*" else None
    return f"every {day_list} at {at}" if day_list else written


# --- reply-directive rewrites ------------------------------------------------------

_EVERY = re.compile(
    r"^every\s*(\d+)?\s*(m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days)$"
)
_AT = re.compile(r"^at\s*(\d{1,2}):(\d{2})$")
_DIRECTIVES = "daily, weekly, hourly, weekdays, every <n> <min|h|d>, at HH:MM"
_UNIT_LIMITS: Mapping[str, tuple[str, int]] = MappingProxyType(
    {"m": ("minutes", 59), "h": ("hours", 23), "d": ("days", 31)}
)


def _fixed(field: str, default: int) -> int:
    """The first concrete value of a field, or ``default`` when it starts with ``*``."""
    if field.startswith("*"):
        return default
    match = re.match(r"\d+", field)
    return int(match.group(0)) if match else default


def _first_weekday(field: str) -> int:
    """The first weekday listed in a day-of-week field, Monday when there is none."""
    match = re.match(r"(\d+|[a-z]{3})", field, re.IGNORECASE)
    if field.startswith("*") or match is None:
        return 1
    token = match.group(1)
    value = int(token) if token.isdigit() else name_value(token, 4)
    return 1 if value is None else value % 7


def _every(minute: int, hour: int, amount: str | None, unit: str) -> str:
    number = int(amount) if amount is not None else 1
    name, high = _UNIT_LIMITS[unit[0]]
    if not 1 <= number <= high:
        hint = {"m": "use 'every <n> h' for longer", "h": "use 'every <n> d' for longer"}
        extra = f"; {hint[unit[0]]}" if number > high and unit[0] in hint else ""
        raise CronError(f"every {number} {name}: {name} must be 1-{high}{extra}")
    step = "*" if number == 1 else f"*/{number}"
    if unit[0] == "m":
        return f"{step} * * * *"
    if unit[0] == "h":
        return f"{minute} {step} * * *"
    return f"{minute} {hour} {step} * *"


def reschedule(expression: str, directive: str) -> str:
    """Rewrite a job's schedule for a reply directive, keeping its time of day.

    A wildcard hour falls back to 09:00, a waking hour, when the result needs one.
    """
    minute_f, hour_f, dom, month, dow = expand(expression).split()
    minute, hour = _fixed(minute_f, 0), _fixed(hour_f, 9)
    words = " ".join(directive.lower().split()) if isinstance(directive, str) else ""
    simple = {
        "daily": f"{minute} {hour} * * *",
        "weekly": f"{minute} {hour} * * {_first_weekday(dow)}",
        "hourly": f"{minute} * * * *",
        "weekdays": f"{minute} {hour} * * 1-5",
    }
    if words in simple:
        return validate_cron(simple[words])
    every = _EVERY.match(words)
    if every:
        return validate_cron(_every(minute, hour, every.group(1), every.group(2)))
    at = _AT.match(words)
    if at:
        new_hour, new_minute = int(at.group(1)), int(at.group(2))
        if new_hour > 23 or new_minute > 59:
            raise CronError(f"{directive.strip()!r} is not a time; use 24-hour HH:MM, e.g. 07:30")
        return validate_cron(f"{new_minute} {new_hour} {dom} {month} {dow}")
    raise CronError(f"unknown schedule directive {directive!r}; use one of: {_DIRECTIVES}")
