"""A parser for ``db_query`` regular expressions, for checking them only (nothing is matched).

MongoDB matches with PCRE and the embedded SecantusDB with Python's ``re``. The parser
accepts the syntax both read the same way (classes, escapes such as ``\\w``, groups,
``(?:...)``, ``(?P<name>...)``, scoped options, quantifiers) and refuses the rest with
a message naming the construct, so a pattern behaves alike on both servers. It builds
a small tree with the source span of each node, so the rules in ``sandbox_regex`` can
point at the part of a pattern that is a problem and write the fixed pattern back.
"""

from __future__ import annotations

import re

from storage.sandbox_regex_tree import Alt, Anchor, Atom, Group, Node, Repeat, Seq
from storage.sandbox_rules import SandboxError

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
