"""Regular expressions the ``db_query`` sandbox lets through: ones that cannot backtrack
for ever, wherever in an argument they hide.

Neither MongoDB nor the embedded SecantusDB can stop a regex halfway through one value:
SecantusDB matches with Python's ``re`` while holding its interpreter lock and checks
``maxTimeMS`` only between documents, so one catastrophic pattern freezes the whole
database, whatever time limit the call has. Checked here, before anything is sent,
identically for both servers (pure functions, no I/O):

1. at most ``MAX_PATTERN_LENGTH`` characters, options among ``imsxu``;
2. no backreferences, lookaround, recursion or conditionals, and only the syntax PCRE
   and Python read alike (``storage.sandbox.regex_tree``);
3. no nested quantifiers: a group repeated more than once may not contain a quantifier
   whose count is open (``(a+)+``, ``(\\w+\\s?)*``, ``(a?){2,9}``), unless the group
   starts or ends with a fixed character none of those quantifiers can take, so each
   pass is marked off (``(\\d+,)*``, ``( \\w+)*``), and no two of them follow each other
   over the same characters (``(,b?b?)*`` is refused);
4. no overlapping alternatives under a repeat (``(a|ab)+``, ``(\\w|\\d)*``, ``(a|)+``);
5. no quadratic (or worse) backtracking (``check_cost``): a quantifier that gives
   characters back may not be tried from every position over the same characters
   (``[a-z]+[0-9]``, ``.*foo``, ``\\w+@``: use ``[a-z][0-9]``, ``foo``, ``\\w@``), and no two
   may share characters in a row (``^\\S+@\\S+$``); ``^.*foo``, ``@[a-z]+\\.`` and
   ``^[^@\\s]+@[^@\\s.]+\\.[^@\\s]+$`` are fine.

A refusal says which part is the problem and, where it can, gives the pattern rewritten.
What passes takes time linear in the value's length.

A pattern reaches the server as ``{"$regex": ..., "$options": ...}`` in a filter (also
inside ``$in``/``$nin``/``$not``/``$elemMatch``/``$and``/``$or``/``$nor``, ``$pull``
conditions, ``$lookup`` sub-pipelines), as an Extended JSON ``$regularExpression`` (or a
BSON/Python regex object once converted), as the ``regex`` of ``$regexMatch``,
``$regexFind`` and ``$regexFindAll`` (in pipelines and ``$expr``), and as ``pattern`` or
``patternProperties`` in a ``$jsonSchema``. ``check_regexes`` does not care where it is:
any of these shapes at any depth is checked with ``check_pattern``. An aggregation regex
must be written out: one read from a document (``"$field"``, ``"$$var"``) or computed by
an expression cannot be checked, so it is refused.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bson.regex import Regex

from storage.sandbox.regex_tree import (
    Alt,
    Anchor,
    Atom,
    Group,
    Node,
    Repeat,
    Seq,
    alternations,
    any_overlap,
    atoms,
    ends,
    nullable,
    overlap,
    parse,
    repeats,
    rewrite,
    sequences,
    show,
    starts,
    unwrap,
    walk,
)
from storage.sandbox.rules import SandboxError

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


# Every place a regular expression can hide in a ``db_query`` argument.

REGEX_EXPRESSIONS: frozenset[str] = frozenset({"$regexMatch", "$regexFind", "$regexFindAll"})
_FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"))


def check_regexes(node: Any, where: str) -> None:
    """Refuse ``node`` if any regular expression in it is unsafe; the message names ``where``."""
    try:
        _visit(node)
    except SandboxError as exc:
        raise SandboxError(f"{where}: {exc}") from None


def _visit(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _visit(item)
    elif isinstance(node, Regex | re.Pattern):
        _check_object(node)
    elif isinstance(node, Mapping):
        if "$regex" in node:
            _query_regex(node["$regex"], node.get("$options"))
        if isinstance(wrapper := node.get("$regularExpression"), Mapping):
            _check_wrapper(wrapper)
        for operator in REGEX_EXPRESSIONS & node.keys():
            _expression_regex(operator, node[operator])
        if "$jsonSchema" in node:
            _schema_patterns(node["$jsonSchema"])
        for value in node.values():
            _visit(value)


def _query_regex(pattern: Any, options: Any) -> None:
    if options is not None and not isinstance(options, str):
        raise SandboxError('$options must be a string of letters such as "i"')
    if isinstance(pattern, str):
        check_pattern(pattern, options or "")
    elif isinstance(pattern, Mapping) and isinstance(pattern.get("$regularExpression"), Mapping):
        _check_wrapper(pattern["$regularExpression"], options or "")
    elif isinstance(pattern, Regex | re.Pattern):
        _check_object(pattern, options or "")
    else:
        raise SandboxError(
            '$regex needs a pattern string, e.g. {"name": {"$regex": "^ann", "$options": "i"}}'
        )


def _check_wrapper(wrapper: Mapping[str, Any], extra: str = "") -> None:
    """``{"$regularExpression": {"pattern": ..., "options": ...}}``; malformed ones fail later."""
    pattern, options = wrapper.get("pattern"), wrapper.get("options", "")
    if isinstance(pattern, str) and isinstance(options, str):
        check_pattern(pattern, options + extra)


def _check_object(regex: Regex[Any] | re.Pattern[Any], extra: str = "") -> None:
    pattern = regex.pattern
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "replace")
    flags = regex.flags
    if isinstance(flags, int):
        letters = "".join(letter for bit, letter in _FLAG_LETTERS if flags & bit)
    else:
        letters = str(flags)
    check_pattern(pattern, letters + extra)


def _expression_regex(operator: str, spec: Any) -> None:
    if not isinstance(spec, Mapping):
        return  # the server explains the shape it wants
    options = spec.get("options", "")
    if not isinstance(options, str):
        raise SandboxError(f'{operator}: options must be written out, e.g. "i"')
    regex = spec.get("regex")
    if isinstance(regex, Mapping) and set(regex) == {"$literal"}:
        regex = regex["$literal"]
    if isinstance(regex, str) and not regex.startswith("$"):
        check_pattern(regex, options)
    elif isinstance(regex, Regex | re.Pattern):
        _check_object(regex, options)
    elif isinstance(regex, Mapping) and isinstance(regex.get("$regularExpression"), Mapping):
        _check_wrapper(regex["$regularExpression"], options)
    elif regex is not None:
        raise SandboxError(
            f"{operator}: regex must be a pattern written in the query (a string such as "
            '"^ann"); a pattern read from a field or computed cannot be checked for safety'
        )


def _schema_patterns(schema: Any) -> None:
    """``pattern`` values and ``patternProperties`` keys of a ``$jsonSchema``, at any depth."""
    if isinstance(schema, list):
        for item in schema:
            _schema_patterns(item)
    elif isinstance(schema, Mapping):
        if isinstance(schema.get("pattern"), str):
            check_pattern(schema["pattern"])
        if isinstance(properties := schema.get("patternProperties"), Mapping):
            for key in properties:
                check_pattern(str(key))
        for value in schema.values():
            _schema_patterns(value)


# Quadratic-or-worse backtracking from quantifiers, estimated on the tree (rule 5).
#
# A backtracking engine tries every way to share a value among quantifiers that can take
# the same characters: two of them in a row cost O(n²) per start position, and a pattern
# without ``^`` is tried at every position, one more factor of n. No server can stop one
# match halfway, so only linear patterns are let through.
#
# The estimate: degree = the longest chain of growing quantifiers (open-ended or above
# ``GROWING`` passes) where each can hand characters to the next: the next can start with
# a character the previous can end with, and everything between them is optional or can
# be taken by the previous; + 1 when the pattern is tried at every position and the
# chain's first quantifier can run over the same characters from several of them. It
# cannot when the pattern starts with ``^`` or ``\A`` (the ``m`` option off), or when a
# required character the quantifier cannot take comes before it with no growing
# quantifier in front (``@[a-z]+\.``: each ``@`` starts a run of its own). Each way through
# the alternatives is a path of its own. A quantifier with nothing after it that can fail
# never gives anything back and does not count. Degree 2 or more is refused.

GROWING = 20
MAX_DEGREE = 1
MAX_PATHS = 256
QUADRATIC = "which takes quadratic time on a long value"
CUBIC = "which takes cubic time or worse on a long value"


@dataclass(frozen=True)
class _Gate:
    """Alternatives without growing quantifiers: one point that can fail, taking one of
    ``chars``."""

    chars: tuple[Atom, ...]


@dataclass(frozen=True)
class _Leaf:
    node: Atom | Anchor | Repeat | _Gate
    """A character, an assertion, a gate, or a growing repeat (not looked into)."""
    optional: bool

    @property
    def growing(self) -> bool:
        return isinstance(self.node, Repeat)

    @property
    def takes(self) -> list[Atom]:
        node = self.node
        if isinstance(node, Repeat):
            return atoms(node.body)
        if isinstance(node, _Gate):
            return list(node.chars)
        return [node] if isinstance(node, Atom) else []


Path = list[_Leaf]


def check_cost(tree: Node, pattern: str, options: str = "") -> None:
    """Refuse ``tree`` (``pattern`` under MongoDB ``options``) when its estimated
    backtracking degree is above ``MAX_DEGREE``; see the module docstring."""
    for path in _paths(tree, optional=False):
        anchored = bool(path) and _anchors_start(path[0], pattern, "m" in options)
        for chain in _chains(path):
            every_start = not anchored and not _fenced(path, chain[0])
            if every_start + len(chain) > MAX_DEGREE:
                _refuse(pattern, options, tree, (path, chain), every_start=every_start)


def _refuse(
    pattern: str, options: str, tree: Node, found: tuple[Path, list[int]], *, every_start: bool
) -> None:
    path, chain = found
    cost = CUBIC if every_start + len(chain) > 2 else QUADRATIC
    head = path[chain[0]].node
    assert isinstance(head, Repeat)
    if len(chain) == 1:
        shown = pattern[head.start : head.end]
        fixed = _without_leading_repeat(pattern, tree, head, options)
        if fixed:
            advice = f"use {show(fixed)} instead of {show(pattern)}: it finds the same values"
        else:
            advice = (
                "start the pattern with ^ if the value begins with it, or put a character "
                f"{shown} cannot take right before it (e.g. @[a-z]+ rather than [a-z]+)"
            )
        raise SandboxError(
            f"it is tried at every position of the value, and from each one {shown} runs "
            f"over the same characters again before what follows it fails, {cost}; {advice}"
        )
    tail = path[chain[1]].node
    assert isinstance(tail, Repeat)
    part = pattern[min(head.start, tail.start) : max(head.end, tail.end)]
    if chain[1] == chain[0] + 1 and head.end <= tail.start:
        span = Repeat(head.start, tail.end, head, 1, None)
        advice = rewrite(pattern, span, atoms(Seq((head, tail))), False)
    elif fixed := _excluding_separator(pattern, options, path, chain):
        advice = f"use {show(fixed)} instead of {show(pattern)}"
    else:
        advice = (
            "write the first so it cannot take what follows it, e.g. [^@\\s]+@[^@\\s]+ "
            "instead of \\S+@\\S+"
        )
    if every_start:
        advice += ", and start the pattern with ^ if the value begins with it"
    raise SandboxError(
        f"in {part} {pattern[head.start : head.end]} and {pattern[tail.start : tail.end]} can "
        f"take the same characters with nothing between them that stops the first, {cost}; "
        f"{advice}"
    )


def _without_leading_repeat(pattern: str, tree: Node, head: Repeat, options: str) -> str | None:
    """``pattern`` with the quantifier of its first item dropped (``[a-z]+x`` → ``[a-z]x``,
    ``.*x`` → ``x``) when ``head`` is that item: a search finds the same values without it.
    None otherwise, or when the result would be refused too."""
    first = tree.items[0] if isinstance(tree, Seq) else tree
    if first is not head:
        return None
    body = pattern[head.body.start : head.body.end] if isinstance(head.body, Atom | Group) else ""
    if not body:
        return None
    kept = body * head.low if head.low <= 3 else f"{body}{{{head.low}}}"
    fixed = pattern[: head.start] + kept + pattern[head.end :]
    if not fixed.strip() or fixed == pattern:
        return None
    try:
        check_cost(parse(fixed, options), fixed, options)
    except SandboxError:
        return None
    return fixed


def _excluding_separator(pattern: str, options: str, path: Path, chain: list[int]) -> str | None:
    """``pattern`` with the character between the first two quantifiers of ``chain`` left
    out of the first one's negated class (``[^@\\s]+\\.[^@\\s]+`` → ``[^@\\s.]+\\.[^@\\s]+``),
    when that is possible and the result is accepted."""
    head = path[chain[0]].node
    assert isinstance(head, Repeat)
    body = head.body
    between = [leaf.node for leaf in path[chain[0] + 1 : chain[1]] if not leaf.optional]
    if not (isinstance(body, Atom) and between and isinstance(between[0], Atom)):
        return None
    char = pattern[between[0].start : between[0].end].removeprefix("\\")
    if not pattern.startswith("[^", body.start) or len(char) != 1 or char.isalnum():
        return None
    end = body.end - 1  # the class's closing bracket
    fixed = pattern[:end] + ("\\" + char if char in "]\\^-" else char) + pattern[end:]
    try:
        check_cost(parse(fixed, options), fixed, options)
    except SandboxError:
        return None
    return fixed


def refuse_neighbours(tree: Node, pattern: str, counts: Callable[[Repeat], bool]) -> None:
    """Refuse two quantifiers that ``counts`` in one sequence, with only optional items
    between them, where the second can start with a character the first can end with
    (inside a repeated group, that choice multiplies with every pass)."""
    for seq in sequences(tree):
        items = [unwrap(i) for i in seq.items]
        for i, left in enumerate(items):
            if not (isinstance(left, Repeat) and counts(left)):
                continue
            for right in items[i + 1 :]:
                if (
                    isinstance(right, Repeat)
                    and counts(right)
                    and any_overlap(ends(left.body), starts(right.body))
                ):
                    span = Repeat(left.start, right.end, left, 1, None)
                    raise SandboxError(
                        f"{pattern[left.start : right.end]} has two quantifiers in a row "
                        "that can take the same characters inside a repeated group, "
                        "which can take exponential time; "
                        + rewrite(pattern, span, atoms(Seq((left, right))), False)
                    )
                if not nullable(right):
                    break


def _paths(node: Node, *, optional: bool) -> list[Path]:
    """Every way through ``node`` as a list of leaves in match order: one path per
    alternative that holds a growing quantifier; bounded repeats unrolled twice."""
    if isinstance(node, Repeat):
        if _is_growing(node):
            return [[_Leaf(node, optional or nullable(node))]]
        once = _paths(node.body, optional=optional or node.low == 0)
        if node.high is None or node.high < 2:
            return once
        twice = _paths(node.body, optional=optional or node.low < 2)
        return _joined([once, twice])
    if isinstance(node, Atom | Anchor):
        return [[_Leaf(node, optional)]]
    if isinstance(node, Group):
        return _paths(node.body, optional=optional)
    if isinstance(node, Alt):
        if not any(_is_growing(n) for n in walk(node) if isinstance(n, Repeat)):
            return [[_Leaf(_Gate(tuple(atoms(node))), optional or nullable(node))]]
        return [p for branch in node.branches for p in _paths(branch, optional=optional)]
    return _joined([_paths(item, optional=optional) for item in node.items])


def _joined(parts: list[list[Path]]) -> list[Path]:
    paths: list[Path] = [[]]
    for options in parts:
        paths = [path + more for path in paths for more in options]
        if len(paths) > MAX_PATHS:
            raise SandboxError(
                f"it combines alternatives in more than {MAX_PATHS} ways; split it into "
                "several conditions"
            )
    return paths


def _is_growing(node: Repeat) -> bool:
    return node.high is None or node.high > GROWING


def _anchors_start(leaf: _Leaf, pattern: str, multiline: bool) -> bool:
    node = leaf.node
    if leaf.optional or not isinstance(node, Anchor):
        return False
    text = pattern[node.start : node.end]
    return text == "\\A" or (text == "^" and not multiline)


def _chains(leaves: Path) -> list[list[int]]:
    """For each growing leaf that must give back, the indexes of the longest chain of
    growing leaves that hand characters on, starting with it."""
    best: dict[int, list[int]] = {}
    for i in reversed(range(len(leaves))):
        leaf = leaves[i]
        if not (leaf.growing and _must_give_back(leaves, i)):
            continue
        chain = [i]
        for j in _hands_to(leaves, i):
            if j in best and len(best[j]) + 1 > len(chain):
                chain = [i, *best[j]]
        best[i] = chain
    return [best[i] for i in sorted(best)]


def _fenced(leaves: Path, i: int) -> bool:
    """A required character leaf ``i`` cannot take comes before it, with no growing leaf
    in front of that character: each place the pattern can start from reaches leaf ``i``
    after a character of its own, so the runs it takes from them do not overlap."""
    taken = leaves[i].takes
    for leaf in leaves[:i]:
        if leaf.growing:
            return False
        fence = isinstance(leaf.node, Atom | _Gate) and not leaf.optional
        if fence and not any_overlap(leaf.takes, taken):
            return True
    return False


def _must_give_back(leaves: Path, i: int) -> bool:
    """Something after leaf ``i`` can fail, so the engine may try other lengths for it."""
    return any(not leaf.optional for leaf in leaves[i + 1 :])


def _hands_to(leaves: Path, i: int) -> list[int]:
    """Growing leaves after ``i`` that can start with what ``i`` can end with, with only
    optional leaves or leaves ``i`` can take between them."""
    node = leaves[i].node
    assert isinstance(node, Repeat)
    taken, last = leaves[i].takes, ends(node.body)
    found: list[int] = []
    for j in range(i + 1, len(leaves)):
        other = leaves[j]
        if other.growing:
            assert isinstance(other.node, Repeat)
            if any_overlap(last, starts(other.node.body)):
                found.append(j)
        if not (
            other.optional or isinstance(other.node, Anchor) or any_overlap(other.takes, taken)
        ):
            break
    return found
