"""Normalising a reply before the grammar sees it: phones and chat apps decorate text.

Quotes (straight and curly, often copied from "Reply '1a'"), trailing punctuation,
emoji, zero-width characters, Markdown-ish stars, fullwidth digits and ``ack'd`` are
folded away so the grammar can stay exact. Only the parser reads the result; the
agent always gets the owner's own words.
"""

import re
import unicodedata
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
