"""The tree of a parsed ``db_query`` regex, and questions about it (pure).

Nodes keep the source span they came from, so rules can quote and rewrite the part of
a pattern they object to.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

SAMPLE = frozenset(map(chr, range(0x180))) | frozenset("\u00a0\u2003\u3000\u200bßéΩж中٣😀")
"""Characters tried when asking whether two character sets can match the same one."""


@dataclass(frozen=True)
class Atom:
    """One character: a literal, a class, an escape such as ``\\w``, or ``.``."""

    start: int
    end: int
    text: str
    flags: int

    def matches(self, char: str) -> bool:
        return _predicate(self.text, self.flags)(char)


@dataclass(frozen=True)
class Anchor:
    """A zero-width assertion: ``^``, ``$``, ``\\b``, ``\\B``, ``\\A``, ``\\z``, ``\\Z``."""

    start: int
    end: int


@dataclass(frozen=True)
class Group:
    start: int
    end: int
    body: Node


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    branches: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    start: int
    end: int
    body: Node
    low: int
    high: int | None
    """``None``: unbounded (``*``, ``+``, ``{n,}``)."""

    @property
    def repeats(self) -> bool:
        """More than one pass over the body."""
        return self.high is None or self.high > 1

    @property
    def variable(self) -> bool:
        """The number of passes is open, so the engine has choices to backtrack over."""
        return self.high != self.low


Node = Atom | Anchor | Group | Seq | Alt | Repeat


@lru_cache(maxsize=512)
def _predicate(text: str, flags: int) -> Callable[[str], bool]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = re.compile(text, flags & (re.IGNORECASE | re.DOTALL))
    except re.error:
        return lambda _char: True  # unknown: assume it matches anything
    return lambda char: compiled.fullmatch(char) is not None


def overlap(a: Atom, b: Atom) -> bool:
    """True when some character matches both ``a`` and ``b``."""
    chars = SAMPLE | frozenset(a.text) | frozenset(b.text)
    return any(a.matches(c) and b.matches(c) for c in chars)


def unwrap(node: Node) -> Node:
    while isinstance(node, Group) and not isinstance(node.body, Seq | Alt):
        node = node.body
    return node


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Alt):
        return node.branches
    if isinstance(node, Group | Repeat):
        return (node.body,)
    return ()


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in children(node):
        yield from walk(child)


def repeats(node: Node) -> Iterator[Repeat]:
    """Repeats that pass over their body more than once, outermost first."""
    return (n for n in walk(node) if isinstance(n, Repeat) and n.repeats)


def alternations(node: Node) -> Iterator[Alt]:
    return (n for n in walk(node) if isinstance(n, Alt))


def sequences(node: Node) -> Iterator[Seq]:
    return (n for n in walk(node) if isinstance(n, Seq))


def atoms(node: Node) -> list[Atom]:
    return [n for n in walk(node) if isinstance(n, Atom)]


def nullable(node: Node) -> bool:
    if isinstance(node, Anchor):
        return True
    if isinstance(node, Atom):
        return False
    if isinstance(node, Repeat):
        return node.low == 0 or nullable(node.body)
    if isinstance(node, Alt):
        return any(nullable(b) for b in node.branches)
    return all(nullable(c) for c in children(node))


def starts(node: Node, *, from_end: bool = False) -> list[Atom]:
    """The characters a match of ``node`` can start with (end with, for ``from_end``)."""
    if isinstance(node, Atom):
        return [node]
    if isinstance(node, Seq):
        found: list[Atom] = []
        for item in reversed(node.items) if from_end else node.items:
            found += starts(item, from_end=from_end)
            if not nullable(item):
                break
        return found
    return [a for child in children(node) for a in starts(child, from_end=from_end)]


def ends(node: Node) -> list[Atom]:
    """The characters a match of ``node`` can end with."""
    return starts(node, from_end=True)


def any_overlap(left: list[Atom], right: list[Atom]) -> bool:
    return any(overlap(a, b) for a in left for b in right)


def rewrite(pattern: str, span: Repeat, parts_of: list[Atom], optional: bool) -> str:
    """Advice with ``span`` of ``pattern`` rewritten as one character class, if possible."""
    generic = "repeat one character class instead, e.g. use ^[\\w\\s]*$ instead of ^(\\w+\\s?)*$"
    parts: list[str] = []
    for atom in parts_of:
        source = pattern[atom.start : atom.end]
        if source.startswith("[^") or (source == "." and len(parts_of) > 1):
            return generic
        inner = source[1:-1] if source.startswith("[") else source
        inner = re.escape(inner) if len(inner) == 1 and inner != "." else inner
        if inner not in parts:
            parts.append(inner)
    if not parts:
        return generic
    bare = len(parts) == 1 and not pattern[parts_of[0].start : parts_of[0].end].startswith("[")
    replacement = (parts[0] if bare else f"[{''.join(parts)}]") + ("*" if optional else "+")
    fixed = pattern[: span.start] + replacement + pattern[span.end :]
    return f"use {show(fixed)} instead of {show(pattern)}"


def show(pattern: str) -> str:
    return pattern if len(pattern) <= 80 else pattern[:77] + "..."
