"""The syntax of a ``db_query`` regex: a parser and the tree it builds, with questions
about the tree (pure; for checking patterns only, nothing is matched).

MongoDB matches with PCRE and the embedded SecantusDB with Python's ``re``. The parser
accepts the syntax both read the same way (classes, escapes such as ``\\w``, groups,
``(?:...)``, ``(?P<name>...)``, scoped options, quantifiers) and refuses the rest with
a message naming the construct, so a pattern behaves alike on both servers. Nodes keep
the source span they came from, so the rules in ``storage.sandbox.regex`` can quote the
part of a pattern they object to and write the fixed pattern back.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from storage.sandbox.rules import SandboxError

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


# The parser.

MAX_REPEAT_BOUND = 1_000
"""Largest ``{n,m}`` bound accepted (PCRE itself stops at 65,535)."""
MAX_GROUP_DEPTH = 20
OPTION_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0}

_CLASS_ESCAPES = frozenset("dDwWsS")
_ANCHOR_ESCAPES = frozenset("bBAzZ")
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_QUANTIFIER = re.compile(r"\{(\d*)(,?)(\d*)\}")
_NUMERIC_ESCAPE = re.compile(r"x[0-9a-fA-F]{2}|0[0-7]{0,2}")
_OPTIONS = re.compile(r"([imsx]*)(?:-([imsx]*))?([:)])")


class _Parser:
    def __init__(self, text: str, flags: int) -> None:
        self.text = text
        self.flags = flags
        self.pos = 0
        self.depth = 0

    def peek(self, count: int = 1) -> str:
        return self.text[self.pos : self.pos + count]

    def parse(self) -> Node:
        node = self.alternation()
        if self.pos < len(self.text):
            raise SandboxError(f"unbalanced ')' at position {self.pos + 1}")
        return node

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.pos < len(self.text) and self.peek() not in "|)":
            if self.skip_verbose():
                continue
            char = self.peek()
            if char in "*+?" or (char == "{" and self.bounds() is not None):
                if not items or isinstance(items[-1], Repeat | Anchor):
                    raise SandboxError(
                        f"quantifier {char!r} at position {self.pos + 1} has nothing to repeat "
                        f"(write \\{char} to match the character itself)"
                    )
                items[-1] = self.quantifier(items[-1])
            elif (node := self.atom()) is not None:
                items.append(node)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def skip_verbose(self) -> bool:
        """With the ``x`` option, whitespace and ``#`` comments outside classes are ignored."""
        if not self.flags & re.VERBOSE:
            return False
        if self.peek().isspace():
            self.pos += 1
            return True
        if self.peek() == "#":
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end + 1
            return True
        return False

    def bounds(self) -> tuple[int, int | None, int] | None:
        """``{n}``, ``{n,}``, ``{n,m}`` or ``{,m}`` at the cursor; other braces are literal."""
        found = _QUANTIFIER.match(self.text, self.pos)
        if found is None or not (found.group(1) or found.group(3)):
            return None
        if not found.group(1):
            raise SandboxError(f"write {{0,{found.group(3)}}} instead of {found.group()}")
        low = int(found.group(1) or 0)
        high = int(found.group(3)) if found.group(3) else (None if found.group(2) else low)
        return low, high, found.end()

    def quantifier(self, item: Node) -> Repeat:
        start = item.start if isinstance(item, Atom | Group) else self.pos
        if self.peek() == "{":
            low, high, end = self.bounds() or (0, None, self.pos)
            spelled = self.text[self.pos : end]
            self.pos = end
            if max(low, high or 0) > MAX_REPEAT_BOUND:
                raise SandboxError(
                    f"repeat {spelled} is over {MAX_REPEAT_BOUND}; use * or + instead"
                )
            if high is not None and high < low:
                raise SandboxError(f"repeat {spelled} has its bounds in the wrong order")
        else:
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[self.peek()]
            self.pos += 1
        if self.peek() in ("?", "+"):
            self.pos += 1  # lazy or possessive: the same rules apply
        return Repeat(start, self.pos, item, low, high)

    def atom(self) -> Node | None:
        start, char = self.pos, self.peek()
        if char == "(":
            return self.group()
        if char == "[":
            return self.char_class()
        if char == "\\":
            return self.escape()
        self.pos += 1
        if char in "^$":
            return Anchor(start, self.pos)
        return Atom(start, self.pos, "." if char == "." else re.escape(char), self.flags)

    def escape(self) -> Node:
        start = self.pos
        char = self.text[start + 1 : start + 2]
        self.pos += 2
        if not char:
            raise SandboxError("the pattern ends with a lone backslash")
        if (char.isdigit() and char != "0") or char in "gk":
            raise SandboxError(
                f"backreference \\{char} is not allowed; match the text again explicitly "
                "or use two conditions"
            )
        if char in _ANCHOR_ESCAPES:
            return Anchor(start, self.pos)
        if char in _CLASS_ESCAPES:
            return Atom(start, self.pos, "\\" + char, self.flags)
        if char in _CHAR_ESCAPES:
            return Atom(start, self.pos, re.escape(_CHAR_ESCAPES[char]), self.flags)
        if char in "x0":
            found = _NUMERIC_ESCAPE.match(self.text, start + 1)
            if found is None:
                raise SandboxError("write \\xhh with two hex digits, e.g. \\x41")
            self.pos = found.end()
            value = chr(int(found.group()[1:] or "0", 16 if char == "x" else 8))
            return Atom(start, self.pos, re.escape(value), self.flags)
        if char.isascii() and char.isalnum():
            raise SandboxError(
                f"escape \\{char} is not supported (MongoDB and the embedded database read it "
                "differently); use a character class such as [a-z] or \\d, \\w, \\s"
            )
        return Atom(start, self.pos, re.escape(char), self.flags)

    def char_class(self) -> Atom:
        start = self.pos
        self.pos += 1
        self.pos += self.peek() == "^"
        self.pos += self.peek() == "]"
        while self.pos < len(self.text) and self.peek() != "]":
            if self.peek(2) == "[:":
                raise SandboxError(
                    "POSIX classes such as [[:alpha:]] are not supported; use [a-zA-Z], "
                    "[0-9], \\w or \\s"
                )
            self.pos += 2 if self.peek() == "\\" else 1
        if self.pos >= len(self.text):
            raise SandboxError(f"character class opened at position {start + 1} is not closed")
        self.pos += 1
        return Atom(start, self.pos, self.text[start : self.pos], self.flags)

    def group(self) -> Group | None:
        start, outer = self.pos, self.flags
        self.pos += 1
        if self.peek() == "?" and not self.group_opening(start):
            return None  # a comment, or options for the rest of the pattern
        if self.peek() == "*":
            raise SandboxError("PCRE verbs such as (*SKIP) are not allowed")
        self.depth += 1
        if self.depth > MAX_GROUP_DEPTH:
            raise SandboxError(f"groups nest more than {MAX_GROUP_DEPTH} deep")
        body = self.alternation()
        if self.peek() != ")":
            raise SandboxError(f"group opened at position {start + 1} is not closed")
        self.pos += 1
        self.depth -= 1
        self.flags = outer
        return Group(start, self.pos, body)

    def group_opening(self, start: int) -> bool:
        """Read what follows ``(?``; True when a group body follows."""
        rest = self.text[self.pos + 1 :]
        if rest.startswith(("=", "!", "<=", "<!")):
            raise SandboxError(
                "lookahead and lookbehind ((?=...), (?!...), (?<=...), (?<!...)) are not "
                'allowed; combine two conditions instead, e.g. {"$and": [{"f": {"$regex": '
                '"a"}}, {"f": {"$not": {"$regex": "b"}}}]}'
            )
        if rest.startswith("#"):
            end = self.text.find(")", self.pos)
            self.pos = len(self.text) if end < 0 else end + 1
            return False
        if named := re.match(r"P<[A-Za-z_]\w*>", rest):
            self.pos += 1 + named.end()
            return True
        if rest.startswith((":", ">")):
            self.pos += 2
            return True
        if rest.startswith(("<", "'")):
            raise SandboxError("write a named group as (?P<name>...), or use (...) or (?:...)")
        options = _OPTIONS.match(rest)
        if options is None:
            raise SandboxError(
                f"(?{rest[:4]}... is not allowed: backreferences, recursion, conditionals "
                "and other special groups are refused; use (...) or (?:...)"
            )
        if options.group(3) == ")" and start != 0:
            raise SandboxError(
                "inline options such as (?i) must come first in the pattern; or use "
                "$options, or a scoped group such as (?i:...)"
            )
        for letter in options.group(1):
            self.flags |= OPTION_FLAGS[letter]
        for letter in options.group(2) or "":
            self.flags &= ~OPTION_FLAGS[letter]
        self.pos += 1 + options.end()
        return options.group(3) == ":"


def parse(pattern: str, options: str) -> Node:
    """The tree of ``pattern`` under MongoDB ``options``; ``SandboxError`` if unusable."""
    flags = 0
    for letter in options:
        flags |= OPTION_FLAGS[letter]
    return _Parser(pattern, flags).parse()
