"""Deterministic parser for the owner's replies to alerts: the grammar and what it produces.

Replies such as ``ack``, ``12a``, ``close 12``, ``snooze 2h #12`` or ``pulse 12 per day``
are applied without the model: they must be instant, free and never misread. Only an
exact match of the grammar is a directive; anything else (``ok but why did the backup
fail?``) is left for the agent, so a question is never swallowed, and the alerts it
names are reported so the agent gets the right one. Codes are digits only. An ack or
resolve word may carry the owner's reason after a separator ("fixed, it was the disk"):
the reason is kept as the note, unless it asks something.

The directive types are plain values with no behaviour: the grammar produces them, the
lifecycle, the router and the schedule services apply them. The text is normalised
first, and durations and moments are read, by ``reply_text`` (quotes, emoji,
punctuation, case, spacing). Pure functions, no I/O.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo
from types import MappingProxyType
from typing import ClassVar, Final, Literal, TypeAlias

from agent.alerts.reply_text import (
    EDGES,
    MAX_REPLY_CHARS,
    RESERVED_KEYWORDS,
    THUMBS_UP,
    duration_minutes,
    format_duration,
    is_reserved,
    normalise,
    split_glued,
    until,
)

__all__ = [
    "DEFAULT_MUTE",
    "DEFAULT_SNOOZE",
    "MAX_HOLD",
    "MAX_INTERVAL_DAYS",
    "MIN_HOLD",
    "NOTE_CHARS",
    "PULSES_PER_DAY",
    "REPLY_WORDS_NOTE",
    "RESERVED_KEYWORDS",
    "SHORT_ACKS",
    "Ack",
    "AckAll",
    "Cadence",
    "Directive",
    "Escalate",
    "IntervalUnit",
    "Mute",
    "ParsedReply",
    "PauseJob",
    "PausePulse",
    "Resolve",
    "ResolveAll",
    "ResumeJob",
    "ResumePulse",
    "Scope",
    "SetCadence",
    "SetInterval",
    "SetPulseRate",
    "SetTime",
    "Snooze",
    "Unmute",
    "format_duration",
    "help_text",
    "parse_reply",
]

Scope = Literal["alert", "all", "cron", "pulse"]
Cadence = Literal["hourly", "daily", "weekly", "weekdays"]
IntervalUnit = Literal["minutes", "hours", "days"]

MIN_HOLD: Final = timedelta(minutes=1)
MAX_HOLD: Final = timedelta(days=30)
DEFAULT_SNOOZE: Final = timedelta(hours=1)
DEFAULT_MUTE: Final = timedelta(days=1)
PULSES_PER_DAY: Final = range(1, 49)
"""Any whole number 1-48, as ``scheduler.pulse.grid.PULSES_PER_DAY``."""
MAX_INTERVAL_DAYS: Final = 31
NOTE_CHARS: Final = 500
"""The longest note kept with an alert, from a reply or from ``manage_alerts``."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge: stops escalation, the alert stays open."""

    kind: ClassVar[Literal["ack"]] = "ack"
    scope: ClassVar[Scope] = "alert"
    note: str | None = None
    """What the owner said of it ("looking into it"), kept with the alert."""


@dataclass(frozen=True, slots=True)
class Resolve:
    """Close the alert: the problem is gone."""

    kind: ClassVar[Literal["resolve"]] = "resolve"
    scope: ClassVar[Scope] = "alert"
    note: str | None = None
    """What the owner said of it ("it was the disk"), kept with the alert."""


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
class Escalate:
    """Run the alert's next escalation step now (an SMS page), whatever its timer says."""

    kind: ClassVar[Literal["escalate"]] = "escalate"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class AckAll:
    """GoAlert's ``<code>aa``: acknowledge every open alert, once the owner confirms."""

    kind: ClassVar[Literal["ack_all"]] = "ack_all"
    scope: ClassVar[Scope] = "all"


@dataclass(frozen=True, slots=True)
class ResolveAll:
    """GoAlert's ``<code>cc``: resolve every open alert, once the owner confirms."""

    kind: ClassVar[Literal["resolve_all"]] = "resolve_all"
    scope: ClassVar[Scope] = "all"


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
    """Set ``pulses_per_day``; always in ``PULSES_PER_DAY`` (1-48)."""

    per_day: int
    kind: ClassVar[Literal["pulse_rate"]] = "pulse_rate"
    scope: ClassVar[Scope] = "pulse"


Directive: TypeAlias = (
    Ack
    | Resolve
    | Snooze
    | Mute
    | Unmute
    | Escalate
    | AckAll
    | ResolveAll
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
    agent; ``code`` (and ``more``) are then the alerts the text names, if any.
    ``error``: a recognisable directive with bad parameters; tell the owner rather
    than asking the model. ``reserved``: a carrier keyword (STOP, HELP, ...), leave it
    alone. ``short``: a short acknowledgement ("k", "thx", "👍") that acks only when
    the message is a reply to an alert; otherwise it is free text. ``everyday``: the
    directive is a word people also use in conversation ("ok", "done", "weekly",
    "resume") and the reply names no alert: it applies only to an alert it plainly
    answers, else it is free text too (``agent.conversation.alert_replies``).
    """

    code: str | None = None
    directive: Directive | None = None
    reserved: bool = False
    error: str | None = None
    short: bool = False
    more: tuple[str, ...] = ()
    """Further codes a free-text reply names, after ``code``."""
    everyday: bool = False


REPLY_WORDS_NOTE: Final = (
    "## Words read as alert replies\n"
    "Soon after an alert, a message of only ok, done, ack, snooze 1h, daily, weekly, "
    "every 2h, at 07:30, pause, resume, pause pulse or a code (#12, 12a) acts on it without "
    "reaching you (on SMS, yes, stop and help are the carrier's). Never ask for one alone "
    "('say resume', 'daily or weekly?'): ask for words naming the subject ('resume Call "
    "Bob')."
)
"""What the model is told (``alert_replies.reply_words_section``), so it never invites
a reply the grammar would take."""

_ACK: Final = Ack()
_RESOLVE: Final = Resolve()
ACK_WORDS: Final = ("ack", "acked", "acknowledge", "acknowledged")
CLOSE_WORDS: Final = ("close", "closed", "resolve", "resolved")
ESCALATE_WORDS: Final = ("escalate", "e")
SHORT_ACKS: Final = frozenset(
    {
        *("k", "kk", "thx", "thanks", "thank you", "ty", "ok thanks", "ok thx", "ok ty"),
        *("okay thanks", "ok thank you", "on it", "ok on it", "got it", "ok got it"),
        *("roger", "noted", "will do", "seen", THUMBS_UP),
    }
)
"""Acknowledge only as a reply to an alert (Telegram reply-to, or soon after it)."""
EVERYDAY_WORDS: Final = frozenset({"ok", "okay", "done", "fixed"})
"""Alert words that are also conversation; every job word (``weekly``, ``resume``,
``every 2h``, ``at 07:30``...) is one too (``is_everyday``)."""


def is_everyday(word: str, directive: Directive) -> bool:
    """Whether a code-less directive could as well be conversation: a change to a job
    or to the pulse ("pause pulse" may be meant for the agent as much as for an alert),
    or one of ``EVERYDAY_WORDS``. ``ack`` is not small talk."""
    return directive.scope in ("cron", "pulse") or word in EVERYDAY_WORDS


_KEYWORDS: Final[Mapping[str, Directive]] = MappingProxyType(
    {
        **dict.fromkeys((*ACK_WORDS, "ok", "okay"), _ACK),
        **dict.fromkeys((*CLOSE_WORDS, "done", "fixed"), _RESOLVE),
        **dict.fromkeys(ESCALATE_WORDS, Escalate()),
        **dict.fromkeys(("ack all", "acknowledge all"), AckAll()),
        **dict.fromkeys(("close all", "resolve all"), ResolveAll()),
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
# GoAlert's one-letter forms only count next to a code: "12a", "a 12", "#12 c", "12aa".
_WITH_CODE: Final[Mapping[str, Directive]] = MappingProxyType(
    {"a": _ACK, "c": _RESOLVE, "aa": AckAll(), "cc": ResolveAll()}
)
# "12 ack", "12 snooze 1h": a bare code may lead these; "ack 12", "a 12": follow these.
_LEADING: Final = frozenset(
    {*ACK_WORDS, *CLOSE_WORDS, *ESCALATE_WORDS, *_WITH_CODE, "snooze", "mute", "unmute"}
    | {THUMBS_UP}
)
_TRAILING: Final = frozenset({*ACK_WORDS, *CLOSE_WORDS, *ESCALATE_WORDS, "a", "c", "unmute"})
_EVERY_CADENCE: Final[Mapping[str, SetCadence]] = MappingProxyType(
    {
        "hour": SetCadence("hourly"),
        "day": SetCadence("daily"),
        "week": SetCadence("weekly"),
        "weekday": SetCadence("weekdays"),
    }
)
_JOB_HEADS: Final = frozenset({"every", "at", "make"})
"""First words of the job directives that take a parameter (``every 2h``, ``at 07:30``)."""
_UNTIL: Final = ("until ", "till ", "til ", "untill ", "unti ")
_HASH_RE: Final = re.compile(r"#([0-9]{1,8})(?![0-9])")
_BARE_RE: Final = re.compile(r"[0-9]{1,8}")
# Alerts that free text names, for the agent's context: "#12", "12a", "ack 12", "12 close".
_MENTION_RE: Final = re.compile(
    r"#([0-9]{1,8})(?![0-9])"
    r"|(?<![\w.:/#])([0-9]{1,8})(?:aa|cc|a|c|e)(?!\w)"
    r"|\b(?:ack|acknowledge|acked|close|closed|resolve|resolved|escalate|alert|incident)"
    r" ?#?([0-9]{1,8})(?![\w.:])"
    r"|(?<![\w.:/#])([0-9]{1,8}) (?:ack|acknowledge|close|resolve|escalate)\b"
)
_MAX_MENTIONS: Final = 5
_GLUED_UNIT_RE: Final = re.compile(r"(?<=[0-9]) (?=[a-z]{1,2}\b)")
_TIME_RE: Final = re.compile(r"([0-9]{1,2})[:.]([0-9]{2})")
_PULSE_RE: Final = re.compile(r"([0-9]+)\s*(?:x\s*|times\s+)?(?:per|a|/)\s*day")

_DIGIT_RE: Final = re.compile(r"[0-9]")
_EXACT: Final[Mapping[str, ParsedReply]] = MappingProxyType(
    {
        **{
            word: ParsedReply(directive=directive, everyday=is_everyday(word, directive))
            for word, directive in _KEYWORDS.items()
        },
        **dict.fromkeys(SHORT_ACKS, ParsedReply(directive=_ACK, short=True)),
        **dict.fromkeys(RESERVED_KEYWORDS, ParsedReply(reserved=True)),
    }
)
"""Whole replies with no code and no parameter, answered by one lookup."""

_Outcome: TypeAlias = Directive | str | None
"""A directive, an error message for a recognisable directive, or None (free text)."""


def parse_reply(text: str, *, now: datetime | None = None, tz: tzinfo | None = None) -> ParsedReply:
    """Parse one reply. ``now`` and ``tz`` (the owner's) are needed only for moments
    (``snooze until 8am``); without them such a reply is free text. A resolve or ack
    word with the owner's reason after it ("fixed, it was the disk") keeps the reason
    as the directive's note (``_with_note``)."""
    parsed = _parse_whole(text, now, tz)
    if parsed.directive is not None or parsed.error is not None or parsed.reserved:
        return parsed
    return _with_note(text, now, tz) or parsed


def _parse_whole(text: str, now: datetime | None, tz: tzinfo | None) -> ParsedReply:
    """The whole reply as one directive, or free text."""
    s = normalise(text)
    known = _EXACT.get(s)  # most replies: one lookup
    if known is not None:
        return known
    if is_reserved(s):
        return ParsedReply(reserved=True)
    if len(s) > MAX_REPLY_CHARS:
        return _free_text(s, ())
    glued = split_glued(s)
    codes = [_code(digits) for digits in _HASH_RE.findall(glued)] if "#" in glued else []
    rest = _HASH_RE.sub(" ", glued) if codes else glued
    bare, body = _bare_code(rest.strip(EDGES).split())
    named = tuple(dict.fromkeys(codes + ([bare] if bare else [])))
    code = named[0] if named else None
    wanted = " ".join(body)
    if wanted in SHORT_ACKS:  # a named alert makes "👍 #12" a plain ack
        return ParsedReply(code=code, directive=_ACK, short=code is None)
    outcome = _parse_body(wanted, bool(named), now, tz)
    if outcome is None:
        return _free_text(s, named)
    if isinstance(outcome, str):
        job_words = code is None and wanted.partition(" ")[0] in _JOB_HEADS
        return ParsedReply(code=code, error=outcome, everyday=job_words)
    if len(named) > 1:
        listed = " and ".join(f"#{c}" for c in named)
        return ParsedReply(code=code, error=f"Found {listed}: reply about one alert at a time.")
    everyday = code is None and is_everyday(wanted, outcome)
    return ParsedReply(code=code, directive=outcome, everyday=everyday)


_NOTE_MARKS: Final = (",", ":", ";", " - ", "\u2014", "\u2013")
"""What ends a directive and starts the owner's note: comma, colon, semicolon, a
spaced hyphen, an em or en dash."""
_NOTE_WORDS: Final = (" because ", " it was ")
"""Words that start a note ("fixed because the disk was full"); the note keeps them."""
_HEAD_CHARS: Final = 40
"""Only this much of a reply is searched for the end of its directive ("#12 fixed")."""
_NOTE_SHORT: Final = frozenset({"on it", "ok on it", "got it", "ok got it", "will do"})
"""The short acknowledgements that take a note ("on it, rebooting the NAS"); "thanks,
..." and "k, ..." are conversation."""
_ASKING: Final = frozenset(
    {
        "but", "and", "also", "please", "pls", "can", "could", "would", "why", "how", "what",
        "now", "then", "next", "make", "set", "change", "remind", "turn", "stop", "add",
        "send", "tell", "schedule", "move", "lets", "let's",
    }
)  # fmt: skip
"""A note opening with one of these goes on to ask something, or for something ("done,
now make the check hourly"): the agent's to answer, not words to keep on the alert."""


def _with_note(text: str, now: datetime | None, tz: tzinfo | None) -> ParsedReply | None:
    """An ack or resolve word (with or without its code) before a separator, and the
    words after it as the note ("fixed, it was the disk", "#3 ack: rebooting it", "done
    because the disk was full"), in the owner's spelling. None (free text) when the head is not
    such a directive, or the note asks something ("?", "but ...") or names an alert.
    Linear: only the first ``_HEAD_CHARS`` are searched, at a few fixed separators."""
    scan = text[:_HEAD_CHARS]
    low = scan.lower()
    cuts = [(at, at + len(mark)) for mark in _NOTE_MARKS if (at := scan.find(mark)) > 0]
    cuts += [(at, at + 1) for word in _NOTE_WORDS if (at := low.find(word)) > 0]
    for end, start in sorted(cuts):
        head = _parse_whole(text[:end], now, tz)
        directive = head.directive
        if not isinstance(directive, Ack | Resolve) or (directive == _ACK and head.everyday):
            continue  # not a directive that takes a note, or "ok, ..." (conversation)
        if head.short and normalise(text[:end]) not in _NOTE_SHORT:
            continue
        return _noted(head, directive, " ".join(text[start:].split()))
    return None


def _noted(head: ParsedReply, directive: Ack | Resolve, note: str) -> ParsedReply | None:
    """The head's directive with ``note``; an overlong note is an error (nothing lost)."""
    words = note.split(" ", 1)
    if "?" in note or _HASH_RE.search(note) or words[0].lower().strip(EDGES) in _ASKING:
        return None
    kept = note if note and normalise(note) not in SHORT_ACKS else None  # "done, thanks"
    if kept is not None and len(kept) > NOTE_CHARS:
        error = (
            f"A note on an alert keeps at most {NOTE_CHARS} characters; yours has "
            f"{len(kept)}. Nothing changed: send it shorter."
        )
        return ParsedReply(code=head.code, error=error, everyday=head.everyday)
    noted = Ack(note=kept) if isinstance(directive, Ack) else Resolve(note=kept)
    return ParsedReply(code=head.code, directive=noted, short=head.short, everyday=head.everyday)


def _code(digits: str) -> str:
    """Codes are stored without leading zeros: ``#012`` is ``#12``."""
    return str(int(digits))


def _bare_code(body: list[str]) -> tuple[str | None, list[str]]:
    """A code without ``#``: ``12 ack`` / ``12 a`` / ``12 snooze 1h``, or ``ack 12`` /
    ``c 12`` / ``e 12``. Elsewhere a number is a number (``snooze 30`` is 30 minutes)."""
    if len(body) >= 2 and _BARE_RE.fullmatch(body[0]) and body[1] in _LEADING:
        return _code(body[0]), body[1:]
    if len(body) == 2 and body[0] in _TRAILING and _BARE_RE.fullmatch(body[1]):
        return _code(body[1]), body[:1]
    return None, body


def _free_text(s: str, named: tuple[str, ...]) -> ParsedReply:
    """Not a directive: the agent answers, told about every alert the text names."""
    found = list(named)
    for match in _MENTION_RE.finditer(s) if _DIGIT_RE.search(s) else ():
        found.append(_code(next(group for group in match.groups() if group)))
        if len(found) >= _MAX_MENTIONS:
            break
    codes = tuple(dict.fromkeys(found))
    if not codes:
        return ParsedReply()
    return ParsedReply(code=codes[0], more=codes[1:])


def _parse_body(body: str, coded: bool, now: datetime | None, tz: tzinfo | None) -> _Outcome:
    """Dispatch on the first word so most replies cost one dict lookup."""
    if body in _WITH_CODE:
        return _WITH_CODE[body] if coded else None
    hit = _KEYWORDS.get(body)
    if hit is not None:
        return hit
    head, _, rest = body.partition(" ")
    if head in ("snooze", "mute"):
        return _parse_hold(head, rest, now, tz)
    if head == "every":
        return _parse_every(rest)
    if head == "at":
        return _parse_at(rest)
    if head == "pulse":
        return _parse_pulse(rest)
    if head == "make":
        return _parse_make(rest)
    return None


def _compact(text: str) -> str:
    """``1 h 30 m`` -> ``1h 30m`` for messages: how the owner most likely typed it."""
    return _GLUED_UNIT_RE.sub("", text)


def _hold(verb: str, duration: timedelta) -> Directive:
    return Snooze(duration) if verb == "snooze" else Mute(duration)


def _hold_error(verb: str, wanted: str) -> str:
    low, high = format_duration(MIN_HOLD), format_duration(MAX_HOLD)
    return f"{verb.capitalize()} needs a duration from {low} to {high}, not {wanted}."


def _parse_hold(verb: str, rest: str, now: datetime | None, tz: tzinfo | None) -> _Outcome:
    """``snooze``/``mute`` with ``[for] <duration>`` (a bare number is minutes) or
    ``until <moment>``, bounded to 1m..30d."""
    if not rest:
        return _hold(verb, DEFAULT_SNOOZE if verb == "snooze" else DEFAULT_MUTE)
    for word in _UNTIL:
        if rest.startswith(word):
            return _parse_until(verb, rest[len(word) :], now, tz)
    wanted = rest.removeprefix("for ")
    minutes = duration_minutes(wanted, bare_minutes=True)
    if minutes is None:
        return None
    whole = round(minutes) if minutes <= MAX_HOLD.total_seconds() / 60 else None
    if whole is None or whole < 1:
        return _hold_error(verb, _compact(wanted))
    return _hold(verb, timedelta(minutes=whole))


def _parse_until(verb: str, when: str, now: datetime | None, tz: tzinfo | None) -> _Outcome:
    """``snooze until 8am`` / ``until tomorrow``: needs the clock and the owner's zone."""
    if now is None or tz is None:
        return None
    held = until(when, now, tz)
    if held is None:
        return None
    if not MIN_HOLD <= held <= MAX_HOLD:
        return _hold_error(verb, f"until {_compact(when)}")
    return _hold(verb, held)


def _parse_every(rest: str) -> _Outcome:
    """``every <n> <unit>``, kept to steps a cron expression can express evenly."""
    cadence = _EVERY_CADENCE.get(rest)
    if cadence is not None:
        return cadence
    minutes = duration_minutes(rest)
    if minutes is None:
        return None
    shown = _compact(rest)
    if minutes > MAX_INTERVAL_DAYS * 1440:
        return f"Can't run every {shown}: the most is {MAX_INTERVAL_DAYS} days."
    whole = round(minutes)
    if whole < 1:
        return f"Can't run every {shown}: the least is 1 minute."
    if whole % 1440 == 0:
        return SetInterval(whole // 1440, "days")
    if whole % 60 == 0:
        hours = whole // 60
        if 24 % hours == 0:
            return SetInterval(hours, "hours")
        return (
            f"Can't run every {shown}: use hours that divide a day "
            "(1, 2, 3, 4, 6, 8, 12) or whole days."
        )
    if 60 % whole == 0:
        return SetInterval(whole, "minutes")
    return (
        f"Can't run every {shown}: use minutes that divide an hour "
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
    """``pulse <n> per day`` (also ``12/day``, ``12 times a day``); n from 1 to 48."""
    match = _PULSE_RE.fullmatch(rest)
    if match is None:
        return None
    digits = match[1]
    per_day = int(digits) if len(digits) <= 3 else -1
    if per_day not in PULSES_PER_DAY:
        low, high = PULSES_PER_DAY[0], PULSES_PER_DAY[-1]
        return f"The pulse can run {low} to {high} times per day (a whole number), not {digits}."
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


def help_text(has_cron: bool, *, has_pulse: bool = False) -> str:
    """Short reply options to append to an alert; schedule/pulse lines only when they apply."""
    lines = ["Reply ack, snooze 1h, mute 1d or resolve (add #12 to pick an alert)."]
    if has_cron:
        lines.append("Job: daily, weekly, hourly, weekdays, every 2h, at 07:30, pause, resume.")
    if has_pulse:
        lines.append("Pulse: pause pulse, resume pulse, pulse 12 per day.")
    return "\n".join(lines)
