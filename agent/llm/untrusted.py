"""Untrusted text in a tagged block: anything reading as the block's own tag defused.

A contact's words and voice notes (``<third_party_message>``) and an MCP tool's result
(``<external_content>``) reach the model inside a block it is told to read as data.
Text that could close the block early would make what follows pass for our own words,
so each ``<`` that opens something reading as the block's tag becomes ``‹`` (plain
text, not an entity; the rest of the text stays as it was sent). Every such block
uses ``defuse``.

"Reading as the tag" is judged the way a model may read it, not byte by byte:
compatibility forms are folded (NFKD, so full-width ``＜／``, small ``﹤`` and ``≮``
count as ``<`` and ``/``), case is ignored, and whatever is not a letter or a digit
between the ``<`` and the name's letters is ignored: zero-width spaces and joiners,
the word joiner, the BOM, soft hyphens and every other format character, combining
marks, spaces, slashes of any kind, ``_`` or ``-``. Letters from other scripts that
only look Latin (a Cyrillic ``а``) are not folded.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from storage.outside import Outside

UNTRUSTED = 'trust="untrusted"'
"""What the opening tag of every untrusted block carries, whatever its name: text
holding it holds outside words (``agent.tools.held``)."""
DEFUSED = "‹"
"""What replaces the ``<`` of a look-alike of a block's tag."""
OPENERS = "<\u226e\ufe64\uff1c"
"""Every character whose compatibility decomposition holds ``<`` (``<``, ``≮``, ``﹤``,
``＜``; tests check this against the whole of Unicode)."""
_KEPT = frozenset("<")
EXTERNAL = "external_content"
"""The block outside data comes in: an MCP tool's result, web search results."""


def defuse(text: str, tag: str) -> str:
    """``text`` with every opening or closing look-alike of ``<tag>`` defused."""
    if not any(opener in text for opener in OPENERS):
        return text  # nothing can open a tag: most text, at the cost of four scans
    pattern = _tag_pattern(tag)
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        for piece in _fold(char):
            folded.append(piece)
            origin.append(index)
    skeleton = "".join(folded)
    out = list(text)
    for match in pattern.finditer(skeleton):
        # Every "<" of the match ("<</x", "</</x"): none is left to pair up anew.
        for pos in range(match.start(), match.end()):
            if skeleton[pos] == "<":
                out[origin[pos]] = DEFUSED
    return "".join(out)


@lru_cache(maxsize=16)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    """One or more ``<`` (slashes and the rest are not kept), then the name's letters."""
    return re.compile("<+" + re.escape("".join(_fold(char) for char in tag)))


@lru_cache(maxsize=4096)
def _fold(char: str) -> str:
    """What ``char`` contributes to the text as a model reads a tag: ``<`` or lower-case
    letters and digits, after compatibility decomposition; nothing for the rest."""
    if char.isascii():
        return char.lower() if char.isalnum() or char in _KEPT else ""
    return "".join(
        piece.casefold()
        for piece in unicodedata.normalize("NFKD", char)
        if piece.isalnum() or piece in _KEPT
    )


def mark_external(text: str, source: str) -> str:
    """``text`` inside an untrusted ``<external_content>`` block naming where it came
    from (``source``, flattened to one short line)."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in source).split())
    origin = flat.replace('"', "'").replace("<", "‹").replace(">", "›")[:120]
    body = defuse(text, EXTERNAL)
    return f'<{EXTERNAL} from="{origin}" {UNTRUSTED}>\n{body}\n</{EXTERNAL}>'


def for_model(value: str | Outside) -> str:
    """What the model reads of ``value``: outside text inside its untrusted block,
    Watchkeeper's own words as they are."""
    if isinstance(value, Outside):
        return mark_external(value.text, value.source)
    return value


_OPENING = re.compile(r"<([a-z_]+)((?:\s+[a-z_]+=\"[^\"]*\")*)\s+" + re.escape(UNTRUSTED) + ">")
_ATTRIBUTE = re.compile(r"([a-z_]+)=\"([^\"]*)\"")
_READ_AS: dict[str, str] = {"third_party_message": "a message from {}"}


def outside_sources(text: str) -> list[str]:
    """Where the untrusted blocks in ``text`` say their words came from, in order
    (repeats kept once): the blocks outside text comes in (``mark_external``, a
    contact's ``<third_party_message>``, memory saved after outside text). Text that
    only mentions the marker counts too: a false alarm holds a call, never frees one."""
    found: dict[str, None] = {}
    if UNTRUSTED not in text:
        return []
    for match in _OPENING.finditer(text):
        attributes = dict(_ATTRIBUTE.findall(match.group(2)))
        origin = attributes.get("from") or attributes.get("after") or ""
        shown = _READ_AS.get(match.group(1), "{}").format(origin) if origin else ""
        found[shown or "outside text"] = None
    return list(found) or ["outside text"]
