"""Regular expressions the ``db_query`` sandbox lets through: ones that cannot backtrack for ever.

Neither MongoDB nor the embedded SecantusDB can stop a regex halfway through one value:
SecantusDB matches with Python's ``re`` while holding its interpreter lock and checks
``maxTimeMS`` only between documents, so ``^(a+)+$`` on a 29-character field froze the
whole database for 38 s. Checked here, before anything is sent, identically for both
servers (pure functions, no I/O):

1. at most ``MAX_PATTERN_LENGTH`` characters, options among ``imsxu``;
2. no backreferences, lookaround, recursion or conditionals, and only the syntax PCRE
   and Python read alike (``sandbox_regex_parse``);
3. no nested quantifiers: a group repeated more than once may not contain a quantifier
   whose count is open (``(a+)+``, ``(\\w+\\s?)*``, ``(a?){2,9}``), unless the group
   starts or ends with a fixed character none of those quantifiers can take, so each
   pass is marked off (``(\\d+,)*``, ``( \\w+)*``), and no two of them follow each other
   over the same characters (``(,b?b?)*`` is refused);
4. no overlapping alternatives under a repeat (``(a|ab)+``, ``(\\w|\\d)*``, ``(a|)+``);
5. no quadratic (or worse) backtracking (``sandbox_regex_cost``): a quantifier that
   gives characters back may not be tried from every position over the same characters
   (``[a-z]+[0-9]``, ``.*foo``, ``\\w+@``: use ``[a-z][0-9]``, ``foo``, ``\\w@``), and no two
   may share characters in a row (``^\\S+@\\S+$``); ``^.*foo``, ``@[a-z]+\\.`` and
   ``^[^@\\s]+@[^@\\s.]+\\.[^@\\s]+$`` are fine.

A refusal says which part is the problem and, where it can, gives the pattern rewritten.
What passes takes time linear in the value's length: ``[a-z]+[0-9]`` froze the embedded
database for 35 s on a 60,000-character value although the call gave up after 4 s, since
no server can stop one match halfway.
"""

from __future__ import annotations

import re
import warnings

from storage.sandbox_regex_cost import check_cost, refuse_neighbours
from storage.sandbox_regex_parse import parse
from storage.sandbox_regex_tree import (
    Alt,
    Atom,
    Group,
    Node,
    Repeat,
    Seq,
    alternations,
    any_overlap,
    atoms,
    nullable,
    overlap,
    repeats,
    rewrite,
    show,
    starts,
    walk,
)
from storage.sandbox_rules import SandboxError

MAX_PATTERN_LENGTH = 200
ALLOWED_OPTIONS = frozenset("imsxu")
EXPONENTIAL = "which can take exponential time"


def check_pattern(pattern: str, options: str = "") -> None:
    """Refuse ``pattern`` (with MongoDB ``options``) unless it is safe to match; see module doc."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SandboxError(
            f"regex is {len(pattern)} characters long; at most {MAX_PATTERN_LENGTH} are allowed "
            "(split it into several conditions)"
        )
    if bad := sorted(set(options) - ALLOWED_OPTIONS):
        raise SandboxError(f"regex option {''.join(bad)!r} is not supported; use i, m, s, x or u")
    try:
        tree = parse(pattern, options)
        _check_compiles(pattern, options)
        _check_nested(tree, pattern)
        _check_alternatives(tree, pattern)
        check_cost(tree, pattern, options)
    except SandboxError as exc:
        raise SandboxError(f"regex {show(pattern)}: {exc}") from None


def _check_compiles(pattern: str, options: str) -> None:
    """The embedded server compiles with Python's ``re``: what it refuses, refuse here too."""
    flags = 0
    for letter, flag in (("i", re.I), ("m", re.M), ("s", re.S), ("x", re.X)):
        flags |= flag if letter in options else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            re.compile(pattern.replace("\\z", "\\Z"), flags)
    except (re.error, FutureWarning, DeprecationWarning) as exc:
        raise SandboxError(f"is not a valid pattern ({exc})") from None


def _check_nested(tree: Node, pattern: str) -> None:
    for outer in repeats(tree):
        inner = [n for n in walk(outer.body) if isinstance(n, Repeat) and n.variable]
        if not inner:
            continue
        if _delimited(outer.body, inner):
            refuse_neighbours(outer.body, pattern, lambda r: r.variable)
            continue
        raise SandboxError(
            f"{pattern[outer.start : outer.end]} repeats a group that has its own quantifier "
            f"({pattern[inner[0].start : inner[0].end]}), {EXPONENTIAL}; "
            + rewrite(pattern, outer, atoms(outer.body), outer.low == 0 or nullable(outer.body))
            + " (a group is fine when it starts or ends with a fixed character its quantifiers "
            "cannot take, e.g. ^\\w+(\\s\\w+)*$)"
        )


def _delimited(body: Node, inner: list[Repeat]) -> bool:
    """The body starts or ends with a plain character none of ``inner`` can take."""
    while isinstance(body, Group):
        body = body.body
    items = body.items if isinstance(body, Seq) else (body,)
    taken = [a for r in inner for a in atoms(r.body)]
    return any(
        isinstance(edge, Atom) and not any(overlap(edge, a) for a in taken)
        for edge in (items[0], items[-1])
    )


def _check_alternatives(tree: Node, pattern: str) -> None:
    for outer in repeats(tree):
        for alt in alternations(outer.body):
            clash = _clash(alt)
            if clash is None:
                continue
            single = [b for b in alt.branches if isinstance(b, Atom)]
            if len(single) == len(alt.branches):
                advice = rewrite(pattern, outer, single, outer.low == 0)
            else:
                advice = (
                    "make the alternatives start with different characters, or match them "
                    "with separate conditions"
                )
            part = pattern[outer.start : outer.end]
            raise SandboxError(f"in {part} {clash}, {EXPONENTIAL}; {advice}")


def _clash(alt: Alt) -> str | None:
    """Why two alternatives could match the same text, or None."""
    for index, branch in enumerate(alt.branches):
        if nullable(branch):
            return f"alternative {index + 1} can match nothing"
        for other in alt.branches[index + 1 :]:
            if any_overlap(starts(branch), starts(other)):
                return "two alternatives can start with the same character"
    return None
