"""Text for Telegram: split to its length limit, and a small, safe Markdown-to-HTML.

Telegram refuses messages over 4,096 characters (counted in UTF-16 code units
after entity parsing), so long replies are cut where a reader would cut them:
between paragraphs, then lines, then sentences, then words, and only as a last
resort in the middle of a word.

Models write Markdown; Telegram's Markdown dialects reject much of what models
produce. Everything is therefore HTML-escaped first, and only a few well-formed
constructs (bold, italic, strike, inline code, code blocks, headings, http
links) become tags. Whatever still fails to parse is resent as plain text by
the channel.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

MAX_LENGTH = 4096

# Where to cut, best first: (separator, characters of it kept at the end of the chunk).
_SEPARATORS: tuple[tuple[str, int], ...] = (
    ("\n\n", 0),
    ("\n", 0),
    (". ", 1),
    ("! ", 1),
    ("? ", 1),
    ("; ", 1),
    (" ", 0),
)

_FENCE = re.compile(r"```[\w+#.-]*\n?(.*?)```", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.DOTALL)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")
_ITALIC_UNDERSCORE = re.compile(r"(?<![\w_])_(?=[^\s_])([^_\n]+?)(?<=\S)_(?![\w_])")


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: characters outside the BMP count twice."""
    return len(text.encode("utf-16-le")) // 2


def _fitting_prefix(text: str, limit: int) -> int:
    """The largest ``n`` such that ``text[:n]`` is at most ``limit`` UTF-16 units."""
    if utf16_length(text[:limit]) <= limit:
        return min(len(text), limit)
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def _cut(text: str, limit: int) -> tuple[int, int]:
    """Where the next chunk ends and where the remainder starts."""
    fits = _fitting_prefix(text, limit)
    for minimum in (fits // 4, 1):
        for sep, kept in _SEPARATORS:
            # A separator may start right at the limit; what is kept of it must fit.
            at = text.rfind(sep, 0, fits - kept + len(sep))
            if at >= minimum:
                return at + kept, at + len(sep)
    hard = max(1, fits)
    return hard, hard


def split_text(text: str, limit: int = MAX_LENGTH) -> list[str]:
    """Cut ``text`` into chunks of at most ``limit`` UTF-16 units, in order."""
    chunks: list[str] = []
    rest = text.strip("\n").rstrip()
    while utf16_length(rest) > limit:
        end, start = _cut(rest, limit)
        head = rest[:end].rstrip()
        if head:
            chunks.append(head)
        rest = rest[start:].lstrip("\n")
    if rest.strip():
        chunks.append(rest)
    return chunks


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _inline(text: str) -> str:
    """Escape ``text`` and turn simple Markdown emphasis into HTML tags."""
    out = _escape(text)
    # Already escaped: only the quote still needs escaping inside the attribute.
    out = _LINK.sub(lambda m: f'<a href="{m[2].replace(chr(34), "&quot;")}">{m[1]}</a>', out)
    out = _HEADING.sub(r"<b>\1</b>", out)
    out = _BOLD.sub(r"<b>\1</b>", out)
    out = _STRIKE.sub(r"<s>\1</s>", out)
    out = _ITALIC_STAR.sub(r"<i>\1</i>", out)
    return _ITALIC_UNDERSCORE.sub(r"<i>\1</i>", out)


def _convert_outside(
    pattern: re.Pattern[str], text: str, inside: Callable[[str], str], outside: Callable[[str], str]
) -> str:
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        parts.append(outside(text[last : match.start()]))
        parts.append(inside(match[1]))
        last = match.end()
    parts.append(outside(text[last:]))
    return "".join(parts)


def to_html(text: str) -> str:
    """Telegram HTML for ``text``: escaped, with code left exactly as written."""

    def pre(code: str) -> str:
        return f"<pre>{_escape(code.strip(chr(10)))}</pre>"

    def code(snippet: str) -> str:
        return f"<code>{_escape(snippet)}</code>"

    def prose(part: str) -> str:
        return _convert_outside(_INLINE_CODE, part, code, _inline)

    return _convert_outside(_FENCE, text, pre, prose)
