"""Deterministic parser for the owner's replies to alerts.

Replies such as ``ack``, ``snooze 2h #12`` or ``pulse 12 per day`` are applied without the
model: they must be instant, free and never misread. Only an exact match of the grammar
is a directive; anything else (``ok but why did the backup fail?``) is left for the agent,
so a question is never swallowed. Pure functions, no I/O.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import time, timedelta
from types import MappingProxyType
from typing import ClassVar, Final, Literal, TypeAlias

Scope = Literal["alert", "cron", "pulse"]
Cadence = Literal["hourly", "daily", "weekly", "weekdays"]
IntervalUnit = Literal["minutes", "hours", "days"]

MIN_HOLD: Final = timedelta(minutes=1)
MAX_HOLD: Final = timedelta(days=30)
DEFAULT_SNOOZE: Final = timedelta(hours=1)
DEFAULT_MUTE: Final = timedelta(days=1)
PULSES_PER_DAY: Final = (48, 24, 12, 6, 2)
MAX_INTERVAL_DAYS: Final = 31

# Twilio's default keywords. Carriers act on them themselves, so we never reinterpret them.
OPT_OUT_KEYWORDS: Final = frozenset(
    {"stop", "stopall", "unsubscribe", "cancel", "end", "quit", "revoke", "optout"}
)
OPT_IN_KEYWORDS: Final = frozenset({"start", "yes", "unstop"})
HELP_KEYWORDS: Final = frozenset({"help", "info"})
RESERVED_KEYWORDS: Final = OPT_OUT_KEYWORDS | OPT_IN_KEYWORDS | HELP_KEYWORDS


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge: stops escalation, the alert stays open."""

    kind: ClassVar[Literal["ack"]] = "ack"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Resolve:
    """Close the alert: the problem is gone."""

    kind: ClassVar[Literal["resolve"]] = "resolve"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Snooze:
    """Hold escalation and repeats of this alert for ``duration``."""

    duration: timedelta
    kind: ClassVar[Literal["snooze"]] = "snooze"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Mute:
    """Silence new alerts with the same dedupe key for ``duration``."""

    duration: timedelta
    kind: ClassVar[Literal["mute"]] = "mute"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Unmute:
    """Lift a mute early."""

    kind: ClassVar[Literal["unmute"]] = "unmute"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class SetCadence:
    """Re-schedule the cron job that raised the alert; the time of day is kept."""

    cadence: Cadence
    kind: ClassVar[Literal["cadence"]] = "cadence"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class SetInterval:
    """Run the cron job every ``count`` ``unit``; always expressible as a cron step."""

    count: int
    unit: IntervalUnit
    kind: ClassVar[Literal["interval"]] = "interval"
    scope: ClassVar[Scope] = "cron"

    @property
    def interval(self) -> timedelta:
        return timedelta(**{self.unit: self.count})


@dataclass(frozen=True, slots=True)
class SetTime:
    """Move the cron job to this time of day (job's timezone), keeping its cadence."""

    at: time
    kind: ClassVar[Literal["at"]] = "at"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class PauseJob:
    """Disable the cron job that raised the alert."""

    kind: ClassVar[Literal["pause"]] = "pause"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class ResumeJob:
    """Re-enable the cron job that raised the alert."""

    kind: ClassVar[Literal["resume"]] = "resume"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class PausePulse:
    """Disable the pulse (heartbeat)."""

    kind: ClassVar[Literal["pause_pulse"]] = "pause_pulse"
    scope: ClassVar[Scope] = "pulse"


@dataclass(frozen=True, slots=True)
class ResumePulse:
    """Re-enable the pulse."""

    kind: ClassVar[Literal["resume_pulse"]] = "resume_pulse"
    scope: ClassVar[Scope] = "pulse"


@dataclass(frozen=True, slots=True)
class SetPulseRate:
    """Set ``pulses_per_day``; always one of ``PULSES_PER_DAY``."""

    per_day: int
    kind: ClassVar[Literal["pulse_rate"]] = "pulse_rate"
    scope: ClassVar[Scope] = "pulse"


Directive: TypeAlias = (
    Ack
    | Resolve
    | Snooze
    | Mute
    | Unmute
    | SetCadence
    | SetInterval
    | SetTime
    | PauseJob
    | ResumeJob
    | PausePulse
    | ResumePulse
    | SetPulseRate
)


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """What a reply means. At most one of ``directive``, ``error`` and ``reserved`` is set.

    ``directive is None`` and ``error is None`` and not ``reserved``: free text for the
    agent. ``error``: a recognisable directive with bad parameters; tell the owner rather
    than asking the model. ``reserved``: a carrier keyword (STOP, HELP, ...), leave it alone.
    """

    code: str | None = None
    directive: Directive | None = None
    reserved: bool = False
    error: str | None = None


_ACK: Final = Ack()
_RESOLVE: Final = Resolve()
_KEYWORDS: Final[Mapping[str, Directive]] = MappingProxyType(
    {
        **dict.fromkeys(("ack", "acked", "ok", "okay", "acknowledge", "acknowledged", "👍"), _ACK),
        **dict.fromkeys(("resolve", "resolved", "done", "close", "closed", "fixed"), _RESOLVE),
        "unmute": Unmute(),
        "hourly": SetCadence("hourly"),
        "daily": SetCadence("daily"),
        "weekly": SetCadence("weekly"),
        "weekdays": SetCadence("weekdays"),
        "pause": PauseJob(),
        "resume": ResumeJob(),
        "pause pulse": PausePulse(),
        "pause the pulse": PausePulse(),
        "resume pulse": ResumePulse(),
        "resume the pulse": ResumePulse(),
    }
)
_EVERY_CADENCE: Final[Mapping[str, SetCadence]] = MappingProxyType(
    {
        "hour": SetCadence("hourly"),
        "day": SetCadence("daily"),
        "week": SetCadence("weekly"),
        "weekday": SetCadence("weekdays"),
    }
)
_UNIT_MINUTES: Final[Mapping[str, int]] = MappingProxyType(
    {
        **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 1),
        **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 60),
        **dict.fromkeys(("d", "day", "days"), 1440),
        **dict.fromkeys(("w", "wk", "wks", "week", "weeks"), 10080),
    }
)

_PUNCT: Final = " .!,;:-"  # not "?": "done?" is a question for the agent
_THUMB_MODIFIERS: Final = "\ufe0f\U0001f3fb\U0001f3fc\U0001f3fd\U0001f3fe\U0001f3ff"
_CODE_RE: Final = re.compile(r"(?<![\w#])#([a-z0-9]{1,8})(?!\w)")
# GoAlert-style "12a" (ack #12) / "12c" (close #12); the code must contain a digit so that
# words such as "pizza" are not read as "ack #pizz".
_SHORTHAND_RE: Final = re.compile(r"([a-z0-9]{0,7}\d[a-z0-9]{0,7})([ac])")
_PART: Final = (
    r"(\d+(?:\.\d+)?)\s*"
    r"(minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w)"
)
_DURATION_RE: Final = re.compile(rf"{_PART}(?:\s*(?:and\s+)?{_PART})*")
_PART_RE: Final = re.compile(_PART)
_TIME_RE: Final = re.compile(r"(\d{1,2})[:.](\d{2})")
_PULSE_RE: Final = re.compile(r"(\d+)\s*(?:x\s*|times\s+)?(?:per|a|/)\s*day")

_Outcome: TypeAlias = Directive | str | None
"""A directive, an error message for a recognisable directive, or None (free text)."""


def parse_reply(text: str) -> ParsedReply:
    """Parse one reply; codes (``#12``) may sit anywhere, the rest must be a directive."""
    s = " ".join(text.lower().split())
    if s.strip(_PUNCT) in RESERVED_KEYWORDS:
        return ParsedReply(reserved=True)
    codes: list[str] = _CODE_RE.findall(s) if "#" in s else []
    if codes:
        body = " ".join(_CODE_RE.sub(" ", s).split()).strip(_PUNCT)
    else:
        body = s.strip(_PUNCT)
        short = _SHORTHAND_RE.fullmatch(body)
        if short is not None:
            return ParsedReply(code=short[1], directive=_ACK if short[2] == "a" else _RESOLVE)
    code = codes[0] if codes else None
    outcome = _parse_body(body)
    if outcome is None:
        return ParsedReply(code=code)
    if isinstance(outcome, str):
        return ParsedReply(code=code, error=outcome)
    if len(set(codes)) > 1:
        listed = " and ".join(f"#{c}" for c in dict.fromkeys(codes))
        return ParsedReply(code=code, error=f"Found {listed}: reply about one alert at a time.")
    return ParsedReply(code=code, directive=outcome)


def _parse_body(body: str) -> _Outcome:
    """Dispatch on the first word so most replies cost one dict lookup."""
    if body.startswith("👍"):
        body = body.rstrip(_THUMB_MODIFIERS)
    hit = _KEYWORDS.get(body)
    if hit is not None:
        return hit
    head, _, rest = body.partition(" ")
    if head in ("snooze", "mute"):
        return _parse_hold(head, rest)
    if head == "every":
        return _parse_every(rest)
    if head == "at":
        return _parse_at(rest)
    if head == "pulse":
        return _parse_pulse(rest)
    if head == "make":
        return _parse_make(rest)
    return None


def _duration_minutes(text: str) -> float | None:
    """Total minutes of ``2h``, ``90 min``, ``1h 30m``, ``1.5 hours``; None if not a duration."""
    if _DURATION_RE.fullmatch(text) is None:
        return None
    return sum(float(n) * _UNIT_MINUTES[unit] for n, unit in _PART_RE.findall(text))


def _parse_hold(verb: str, rest: str) -> _Outcome:
    """``snooze``/``mute`` with an optional ``[for] <duration>``, bounded to 1m..30d."""
    if not rest:
        return Snooze(DEFAULT_SNOOZE) if verb == "snooze" else Mute(DEFAULT_MUTE)
    wanted = rest[4:] if rest.startswith("for ") else rest
    minutes = _duration_minutes(wanted)
    if minutes is None:
        return None
    whole = round(minutes) if minutes <= MAX_HOLD.total_seconds() / 60 else None
    if whole is None or whole < 1:
        low, high = format_duration(MIN_HOLD), format_duration(MAX_HOLD)
        return f"{verb.capitalize()} needs a duration from {low} to {high}, not {wanted}."
    duration = timedelta(minutes=whole)
    return Snooze(duration) if verb == "snooze" else Mute(duration)


def _parse_every(rest: str) -> _Outcome:
    """``every <n> <unit>``, kept to steps a cron expression can express evenly."""
    cadence = _EVERY_CADENCE.get(rest)
    if cadence is not None:
        return cadence
    minutes = _duration_minutes(rest)
    if minutes is None:
        return None
    if minutes > MAX_INTERVAL_DAYS * 1440:
        return f"Can't run every {rest}: the most is {MAX_INTERVAL_DAYS} days."
    whole = round(minutes)
    if whole < 1:
        return f"Can't run every {rest}: the least is 1 minute."
    if whole % 1440 == 0:
        return SetInterval(whole // 1440, "days")
    if whole % 60 == 0:
        hours = whole // 60
        if 24 % hours == 0:
            return SetInterval(hours, "hours")
        return (
            f"Can't run every {rest}: use hours that divide a day "
            "(1, 2, 3, 4, 6, 8, 12) or whole days."
        )
    if 60 % whole == 0:
        return SetInterval(whole, "minutes")
    return (
        f"Can't run every {rest}: use minutes that divide an hour "
        "(1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30) or whole hours."
    )


def _parse_at(rest: str) -> _Outcome:
    """``at HH:MM`` (24-hour, ``7:30`` or ``07.30`` too)."""
    match = _TIME_RE.fullmatch(rest)
    if match is None:
        return None
    hour, minute = int(match[1]), int(match[2])
    if hour > 23 or minute > 59:
        return f"{rest} is not a time: use 24-hour HH:MM, e.g. at 07:30."
    return SetTime(time(hour, minute))


def _parse_pulse(rest: str) -> _Outcome:
    """``pulse <n> per day`` (also ``12/day``, ``12 times a day``); n from PULSES_PER_DAY."""
    match = _PULSE_RE.fullmatch(rest)
    if match is None:
        return None
    digits = match[1]
    per_day = int(digits) if len(digits) <= 3 else -1
    if per_day not in PULSES_PER_DAY:
        allowed = ", ".join(map(str, PULSES_PER_DAY[:-1])) + f" or {PULSES_PER_DAY[-1]}"
        return f"The pulse can run {allowed} times per day, not {digits}."
    return SetPulseRate(per_day)


def _parse_make(rest: str) -> _Outcome:
    """``make it weekly`` / ``make this every 2 hours``: schedule changes only."""
    pronoun, _, inner = rest.partition(" ")
    if pronoun not in ("it", "this"):
        return None
    if inner.startswith("every "):
        return _parse_every(inner[6:])
    hit = _KEYWORDS.get(inner)
    return hit if isinstance(hit, SetCadence) else None


def format_duration(td: timedelta) -> str:
    """Compact form for confirmations: ``2h``, ``1d``, ``30m``, ``1h 30m``."""
    if td < timedelta(0):
        return "-" + format_duration(-td)
    seconds = int(td.total_seconds())
    if seconds < 60:
        return f"{seconds}s" if seconds else "0m"
    days, rest = divmod(seconds // 60, 1440)
    hours, minutes = divmod(rest, 60)
    parts = (f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m")) if v)
    return " ".join(parts)


def help_text(has_cron: bool, *, has_pulse: bool = False) -> str:
    """Short reply options to append to an alert; schedule/pulse lines only when they apply."""
    lines = ["Reply ack, snooze 1h, mute 1d or resolve (add #12 to pick an alert)."]
    if has_cron:
        lines.append("Job: daily, weekly, hourly, weekdays, every 2h, at 07:30, pause, resume.")
    if has_pulse:
        lines.append("Pulse: pause pulse, resume pulse, pulse 12 per day.")
    return "\n".join(lines)
