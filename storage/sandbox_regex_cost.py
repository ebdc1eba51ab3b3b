"""Quadratic-or-worse backtracking from quantifiers, estimated on the tree (pure).

A backtracking engine tries every way to share a value among quantifiers that can take
the same characters: two of them in a row cost O(n²) per start position, and a pattern
without ``^`` is tried at every position, one more factor of n. ``\\w+\\s?\\w+@`` took
17 s on a 2,000-character value, an unanchored ``\\S+@\\S+\\.\\S+`` 19 s on 3,000, and the
quadratic ``[a-z]+[0-9]`` froze the embedded database for 35 s on a 60,000-character
value: no server can stop one match halfway, so only linear patterns are let through.

The estimate: degree = the longest chain of growing quantifiers (open-ended or above
``GROWING`` passes) where each can hand characters to the next: the next can start with
a character the previous can end with, and everything between them is optional or can
be taken by the previous; + 1 when the pattern is tried at every position and the
chain's first quantifier can run over the same characters from several of them. It
cannot when the pattern starts with ``^`` or ``\\A`` (the ``m`` option off), or when a
required character the quantifier cannot take comes before it with no growing
quantifier in front (``@[a-z]+\\.``: each ``@`` starts a run of its own). Each way through
the alternatives is a path of its own. A quantifier with nothing after it that can fail
never gives anything back and does not count. Degree 2 or more is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.sandbox_regex_parse import parse
from storage.sandbox_regex_tree import (
    Alt,
    Anchor,
    Atom,
    Group,
    Node,
    Repeat,
    Seq,
    any_overlap,
    atoms,
    ends,
    nullable,
    rewrite,
    sequences,
    show,
    starts,
    unwrap,
    walk,
)
from storage.sandbox_rules import SandboxError

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
