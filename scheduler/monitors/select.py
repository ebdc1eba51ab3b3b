"""A small, safe subset of CSS selectors, for the part of a page a ``change`` monitor
compares: no HTML library the project has matches selectors, so this one does.

Understood: a tag (``span``), ``#id``, ``.class`` (several: ``.price.now``), ``*``, any
of them together (``div#main.price``), and descendants separated by spaces
(``main .price span``). Anything else (``>``, ``+``, ``~``, ``[attr]``, ``:hover``,
commas) is refused with a message saying what is understood. Matching one element
looks at its open ancestors once (right to left, greedily, which is exact for the
descendant combinator alone), so a page costs at most its tags times ``MAX_DEPTH``
times the parts of the selector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_DEPTH = 256
"""Open elements tracked; deeper ones are not matched (no real page nests so deep)."""
MAX_PARTS = 8
SELECTOR_LIMIT = 200
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
UNDERSTOOD = "tag, #id, .class, and descendants separated by spaces (e.g. 'main .price')"


class SelectorError(ValueError):
    """A selector outside the subset understood; the message says what is."""


@dataclass(frozen=True)
class Element:
    """An open element as a selector sees it."""

    tag: str
    id: str | None
    classes: frozenset[str]

    @classmethod
    def of(cls, tag: str, attrs: Sequence[tuple[str, str | None]]) -> Element:
        found = dict(attrs)
        return cls(tag, found.get("id"), frozenset((found.get("class") or "").split()))


@dataclass(frozen=True)
class Compound:
    """One part of a selector: what a single element must be."""

    tag: str | None
    id: str | None
    classes: frozenset[str]

    def fits(self, element: Element) -> bool:
        return (
            (self.tag is None or self.tag == element.tag)
            and (self.id is None or self.id == element.id)
            and self.classes <= element.classes
        )


@dataclass(frozen=True)
class Selector:
    text: str
    parts: tuple[Compound, ...]

    def matches(self, open_elements: Sequence[Element]) -> bool:
        """Whether the innermost of ``open_elements`` (outermost first) matches."""
        if not open_elements or not self.parts[-1].fits(open_elements[-1]):
            return False
        wanted = len(self.parts) - 2
        for element in reversed(open_elements[:-1]):
            if wanted < 0:
                break
            if self.parts[wanted].fits(element):
                wanted -= 1
        return wanted < 0


def _compound(text: str, whole: str) -> Compound:
    tag: str | None = None
    ident: str | None = None
    classes: set[str] = set()
    pos = 0
    if text.startswith("*"):
        pos = 1
    elif text[0] not in "#.":
        end = _name_end(text, 0)
        tag, pos = text[:end].lower(), end
    while pos < len(text):
        mark = text[pos]
        end = _name_end(text, pos + 1)
        name = text[pos + 1 : end]
        if mark not in "#." or not name:
            raise SelectorError(f"selector {whole!r} is not understood; use {UNDERSTOOD}")
        if mark == "#":
            ident = name
        else:
            classes.add(name)
        pos = end
    if tag == "":
        raise SelectorError(f"selector {whole!r} is not understood; use {UNDERSTOOD}")
    return Compound(tag, ident, frozenset(classes))


def _name_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] in _NAME_CHARS:
        end += 1
    return end


def parse_selector(text: str) -> Selector:
    """The selector ``text`` names; ``SelectorError`` for one outside the subset."""
    whole = " ".join(text.split())
    if not whole:
        raise SelectorError("selector must be a non-empty text")
    if len(whole) > SELECTOR_LIMIT:
        raise SelectorError(f"selector is {len(whole)} characters; at most {SELECTOR_LIMIT}")
    pieces = whole.split(" ")
    if len(pieces) > MAX_PARTS:
        raise SelectorError(f"selector has {len(pieces)} parts; at most {MAX_PARTS}")
    return Selector(whole, tuple(_compound(piece, whole) for piece in pieces))
