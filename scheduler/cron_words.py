"""Cron in words: an expression described for people, and reply directives
("weekly", "every 2h", "at 07:30") rewritten into a new expression."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from scheduler.cron import ALIASES, CronError, expand, name_value, validate_cron

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


def describe(expression: str) -> str:
    """Short English for common shapes; any other expression is returned as written."""
    try:
        written = validate_cron(expression)
    except CronError:
        return expression
    expanded = ALIASES.get(written, written)
    minute, hour, dom, month, dow = expanded.split()
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
