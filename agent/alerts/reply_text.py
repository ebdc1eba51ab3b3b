"""Reading a reply's words before the grammar sees them: normalising, durations, moments.

Phones and chat apps decorate text. Quotes (straight and curly, often copied from
"Reply '1a'"), trailing punctuation, emoji, zero-width characters, Markdown-ish stars,
fullwidth digits and ``ack'd`` are folded away so the grammar can stay exact. Only the
parser reads the result; the agent always gets the owner's own words.

Durations and moments (``30``, ``1h30``, ``an hour``, ``until 8am``) are read from
normalised text (lower case, digits split from letters, so ``1h30m`` arrives as
``1 h 30 m``). A duration is returned in minutes; a moment ("until tomorrow") as the
time from ``now`` to it, in the owner's timezone. Anything not understood is None,
never a guess.
"""

import re
import unicodedata
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from types import MappingProxyType
from typing import Final

MAX_REPLY_CHARS: Final = 200
"""A longer message is never a directive; it is not normalised at all."""
THUMBS_UP: Final = "👍"
"""What an emoji-only acknowledgement (👍, 👌, ✅...) becomes."""

# Twilio's default keywords. Carriers act on them themselves, so we never reinterpret them.
OPT_OUT_KEYWORDS: Final = frozenset(
    {"stop", "stopall", "unsubscribe", "cancel", "end", "quit", "revoke", "optout"}
)
OPT_IN_KEYWORDS: Final = frozenset({"start", "yes", "unstop"})
HELP_KEYWORDS: Final = frozenset({"help", "info"})
RESERVED_KEYWORDS: Final = OPT_OUT_KEYWORDS | OPT_IN_KEYWORDS | HELP_KEYWORDS

_QUOTES: Final = "'\"`´‘’‚‛“”„‟«»‹›"
_TO_SPACE: Final = dict.fromkeys(map(ord, _QUOTES + ",\u00a0"), " ")
# Stripped from both ends; not "?": "done?" is a question for the agent.
EDGES: Final = " .!,;:-~*_()[]"
_ACK_EMOJI: Final = frozenset("👍👌✅✔☑🆗🙏")
_EMOJI_CATEGORIES: Final = frozenset({"So", "Sk", "Cs", "Co"})
_JOINERS: Final = frozenset("\ufe0e\ufe0f\u20e3")
_ACKED_RE: Final = re.compile(r"\back(?:['’`´]?d|ed)\b")
_CODE_ONLY_RE: Final = re.compile(r"#?[0-9]{1,8}")
_DIGIT_RE: Final = re.compile(r"[0-9]")
_GLUE_RE: Final = re.compile(r"(?<=[0-9])(?=[a-z])|(?<=[a-z])(?=[0-9])")


def normalise(text: str) -> str:
    """The reply as the grammar reads it: lower case, single spaces, decorations gone.

    An emoji-only reply with an acknowledging emoji becomes ``👍``; one with none
    becomes empty. Longer than ``MAX_REPLY_CHARS``: returned lower-cased only.
    """
    if len(text) > MAX_REPLY_CHARS:
        return text.lower()
    acked_by_emoji = False
    if not text.isascii():
        text, acked_by_emoji = _strip_unicode(text)
    s = text.lower()
    if "ack" in s:
        s = _ACKED_RE.sub("acked", s)
    s = s.translate(_TO_SPACE)
    s = " ".join(s.split()).strip(EDGES)
    if acked_by_emoji and (not s or _CODE_ONLY_RE.fullmatch(s)):
        return f"{s} {THUMBS_UP}".lstrip()  # "👍", "#12 👍"
    return s


def _strip_unicode(text: str) -> tuple[str, bool]:
    """Fold compatibility forms (fullwidth ``１２ａ``, ``…``), drop invisible format
    characters (zero-width space, joiners, direction marks) and emoji."""
    folded = unicodedata.normalize("NFKC", text)
    kept: list[str] = []
    acked = False
    for ch in folded:
        if ch in _JOINERS:
            continue
        category = unicodedata.category(ch)
        if category == "Cf":
            continue
        if category in _EMOJI_CATEGORIES:
            acked = acked or ch in _ACK_EMOJI
            kept.append(" ")
            continue
        kept.append(ch)
    return "".join(kept), acked


def split_glued(s: str) -> str:
    """``12a`` -> ``12 a``, ``ack12`` -> ``ack 12``, ``1h30`` -> ``1 h 30``, ``ack#12`` ->
    ``ack #12``: the grammar then reads words, whatever the owner's spacing."""
    if "#" in s:
        s = s.replace("#", " #")
    return _GLUE_RE.sub(" ", s) if _DIGIT_RE.search(s) else s


def is_reserved(s: str) -> bool:
    """A carrier keyword on its own (``STOP``, ``help``): never ours to answer."""
    return s in RESERVED_KEYWORDS


MAX_TOKENS: Final = 12
MORNING: Final = time(9, 0)
"""What "until tomorrow" and "until monday" mean: that day at 09:00, owner's time."""

UNIT_MINUTES: Final[Mapping[str, int]] = MappingProxyType(
    {
        **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 1),
        **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 60),
        **dict.fromkeys(("d", "day", "days"), 1440),
        **dict.fromkeys(("w", "wk", "wks", "week", "weeks"), 10080),
    }
)
_ONES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "one": 1,
        "two": 2,
        "three": 3,
        "four": 4,
        "five": 5,
        "six": 6,
        "seven": 7,
        "eight": 8,
        "nine": 9,
    }
)
_WORDS: Final[Mapping[str, int]] = MappingProxyType(
    {
        **_ONES,
        "a": 1,
        "an": 1,
        "ten": 10,
        "eleven": 11,
        "twelve": 12,
        "fifteen": 15,
        "eighteen": 18,
        "ninety": 90,
    }
)
_TENS: Final[Mapping[str, int]] = MappingProxyType(
    {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60}
)
_NUMBER_RE: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_CLOCK_RE: Final = re.compile(
    r"(?:at )?([0-9]{1,2})(?:[:.]([0-9]{2}))? ?(?:(a)\.?m\.?|(p)\.?m\.?)?"
)
_TOMORROW: Final = frozenset({"tomorrow", "tmrw", "tmr", "tomorow", "tommorow"})
_NAMED_TIMES: Final[Mapping[str, time]] = MappingProxyType(
    {
        "morning": MORNING,
        "the morning": MORNING,
        "noon": time(12, 0),
        "midday": time(12, 0),
        "midnight": time(0, 0),
    }
)
_WEEKDAYS: Final[Mapping[str, int]] = MappingProxyType(
    {
        **dict.fromkeys(("monday", "mon"), 0),
        **dict.fromkeys(("tuesday", "tue", "tues"), 1),
        **dict.fromkeys(("wednesday", "wed"), 2),
        **dict.fromkeys(("thursday", "thu", "thur", "thurs"), 3),
        **dict.fromkeys(("friday", "fri"), 4),
        **dict.fromkeys(("saturday", "sat"), 5),
        **dict.fromkeys(("sunday", "sun"), 6),
    }
)


def duration_minutes(text: str, *, bare_minutes: bool = False) -> float | None:
    """Minutes in ``2 h``, ``90 min``, ``1 h 30 m``, ``1 h 30``, ``1.5 hours``,
    ``an hour``, ``half an hour``, ``two hours``, ``an hour and a half``; with
    ``bare_minutes``, a lone number (``30``) too. None if it is not a duration."""
    tokens = text.replace("-", " ").split()
    if not tokens or len(tokens) > MAX_TOKENS:
        return None
    if bare_minutes and len(tokens) == 1 and _NUMBER_RE.fullmatch(tokens[0]):
        return float(tokens[0])
    total, i, last_unit = 0.0, 0, 0
    while i < len(tokens):
        if tokens[i] == "and" and last_unit:
            i += 1
        read = _number(tokens, i)
        if read is None:
            return None
        value, i = read
        if i < len(tokens) and tokens[i] in UNIT_MINUTES:
            unit = UNIT_MINUTES[tokens[i]]
            i += 1
        elif i == len(tokens) and last_unit == 60 and value.is_integer():
            unit = 1  # "1h30": the number after the hours is minutes
        else:
            return None
        total += value * unit
        if tokens[i : i + 3] == ["and", "a", "half"]:  # "an hour and a half"
            total += unit / 2
            i += 3
        last_unit = unit
    return total


def _number(tokens: list[str], i: int) -> tuple[float, int] | None:
    """One amount at ``tokens[i]`` (digits or words) and the index after it."""
    if i >= len(tokens):
        return None
    word, rest = tokens[i], tokens[i + 1 : i + 3]
    value: float
    if _NUMBER_RE.fullmatch(word):
        value, i = float(word), i + 1
    elif word == "half" or (word in ("a", "an") and rest[:1] == ["half"]):
        i += 1 if word == "half" else 2
        value, i = 0.5, _skip(tokens, i, "of", "a", "an")  # "half an hour", "a half hour"
    elif word == "quarter" or (word in ("a", "an") and rest[:1] == ["quarter"]):
        i += 1 if word == "quarter" else 2
        value, i = 0.25, _skip(tokens, i, "of", "a", "an")  # "a quarter of an hour"
    elif word == "couple" or (word == "a" and rest[:1] == ["couple"]):
        i += 1 if word == "couple" else 2
        value, i = 2.0, _skip(tokens, i, "of")
    elif word in _TENS:
        value, i = float(_TENS[word]), i + 1
        if i < len(tokens) and tokens[i] in _ONES:  # "forty five"
            value, i = value + _ONES[tokens[i]], i + 1
    elif word in _WORDS:
        value, i = float(_WORDS[word]), i + 1
    else:
        return None
    after = tokens[i : i + 4]
    if after[:3] == ["and", "a", "half"] and after[3:] and after[3] in UNIT_MINUTES:
        value, i = value + 0.5, i + 3  # "two and a half hours"
    return value, i


def _skip(tokens: list[str], i: int, *words: str) -> int:
    while i < len(tokens) and tokens[i] in words:
        i += 1
    return i


def until(text: str, now: datetime, tz: tzinfo) -> timedelta | None:
    """Time from ``now`` to ``8 am``, ``08:00``, ``tomorrow``, ``tomorrow 8 am``,
    ``morning``, ``noon``, ``midnight``, ``monday``, ``friday 17:00`` (the next such
    moment, owner's time). A bare hour (``8``) is None: am or pm is not guessed."""
    words = text.split()
    if not words or len(words) > MAX_TOKENS:
        return None
    local = now.astimezone(tz)
    day: date | None = None
    if words[0] in _TOMORROW or words[-1] in _TOMORROW:
        day = local.date() + timedelta(days=1)
        words = words[1:] if words[0] in _TOMORROW else words[:-1]
    elif words[0] in _WEEKDAYS:
        ahead = (_WEEKDAYS[words[0]] - local.weekday()) % 7 or 7
        day, words = local.date() + timedelta(days=ahead), words[1:]
    at = _clock(" ".join(words)) if words else (MORNING if day else None)
    if at is None:
        return None
    target = datetime.combine(day or local.date(), at, tzinfo=tz)
    if day is None and target <= local:
        target = datetime.combine(local.date() + timedelta(days=1), at, tzinfo=tz)
    return target.astimezone(UTC) - now


def _clock(text: str) -> time | None:
    """``8 am``, ``8:30 pm``, ``at 20:15``, ``morning``, ``noon``; None when unsure."""
    named = _NAMED_TIMES.get(text.removeprefix("at ").removeprefix("in "))
    if named is not None:
        return named
    match = _CLOCK_RE.fullmatch(text)
    if match is None:
        return None
    hour, minute = int(match[1]), int(match[2] or 0)
    if match[3] or match[4]:  # 12-hour clock
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if match[4] else 0)
    elif match[2] is None:
        return None
    if hour > 23 or minute > 59:
        return None
    return time(hour, minute)


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
