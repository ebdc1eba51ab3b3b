"""Cubic-or-worse backtracking from quantifiers in a row, estimated on the tree (pure).

A backtracking engine tries every way to share a value among quantifiers that can take
the same characters: two of them in a row cost O(n²) per start position, and a pattern
without ``^`` is tried at every position, one more factor of n. ``\\w+\\s?\\w+@`` took
17 s on a 2,000-character value, an unanchored ``\\S+@\\S+\\.\\S+`` 19 s on 3,000.

The estimate: degree = 1 for an unanchored pattern (0 when it starts with ``^`` or
``\\A`` and the ``m`` option is off) + the longest chain of growing quantifiers (open-ended
or above ``GROWING`` passes) where each can hand characters to the next: the next can
start with a character the previous can end with, and everything between them is
optional or can be taken by the previous. Each way through the alternatives is a path
of its own. A quantifier with nothing after it that can fail never gives anything back
and does not count. Degree 3 or more is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
    starts,
    unwrap,
    walk,
)
from storage.sandbox_rules import SandboxError

GROWING = 20
MAX_DEGREE = 2
MAX_PATHS = 256
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


def check_cost(tree: Node, pattern: str, *, multiline: bool) -> None:
    """Refuse ``tree`` when its estimated backtracking degree is above ``MAX_DEGREE``."""
    for path in _paths(tree, optional=False):
        anchored = bool(path) and _anchors_start(path[0], pattern, multiline)
        chain = _longest_chain(path)
        if (not anchored) + len(chain) > MAX_DEGREE:
            _refuse(pattern, path, chain, anchored)


def _refuse(pattern: str, path: Path, chain: list[int], anchored: bool) -> None:
    head, tail = path[chain[0]].node, path[chain[1]].node
    assert isinstance(head, Repeat) and isinstance(tail, Repeat)
    part = pattern[min(head.start, tail.start) : max(head.end, tail.end)]
    if chain[1] == chain[0] + 1 and head.end <= tail.start:
        span = Repeat(head.start, tail.end, head, 1, None)
        advice = rewrite(pattern, span, atoms(Seq((head, tail))), False)
    else:
        advice = (
            "write the first so it cannot take what follows it, e.g. [^@\\s]+@[^@\\s]+ "
            "instead of \\S+@\\S+"
        )
    if not anchored:
        advice += ", or start the pattern with ^ if the value begins with it"
    raise SandboxError(
        f"in {part} {pattern[head.start : head.end]} and {pattern[tail.start : tail.end]} can "
        f"take the same characters with nothing between them that stops the first, {CUBIC}; "
        f"{advice}"
    )


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


def _longest_chain(leaves: Path) -> list[int]:
    """Indexes of the longest chain of growing leaves that hand characters on."""
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
    return max(best.values(), key=len, default=[])


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
