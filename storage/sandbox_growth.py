"""Expressions that could grow a value without bound inside the database: refused up front.

A pipeline that doubles a string with ``$reduce``/``$concat`` reached 8 MB per document
in 20 steps, and the embedded SecantusDB runs every stage over all documents at once,
so the database passed 1 GB before any size check. The rules (pure, refusals only; no
expression is rewritten):

1. ``$range``: bounds written as integers (the end may be ``{"$size": "$array"}``), at
   most ``MAX_RANGE`` numbers, and never inside a ``$map``/``$filter``/``$reduce``
   per-element expression (one array per element).
2. ``$reduce``: ``$$value`` used at most once in ``in`` (twice doubles it every step),
   not through ``$let`` or a nested loop; when ``in`` builds strings, arrays or objects,
   it may use only ``$$value``, ``$$this`` and its own variables, and literals of at
   most ``MAX_LOOP_LITERAL`` characters.
3. ``$map``/``$filter``/``$reduce`` over a ``$range``: the per-element expression uses
   only its own variables (a field would be copied once per number), strings of at most
   ``MAX_LOOP_LITERAL`` characters, and at most ``MAX_LOOP_BODY`` characters of JSON.
4. ``$concat``/``$concatArrays``: a field, ``$$ROOT``/``$$CURRENT`` or ``$$value`` at
   most once among the operands (``{"$set": {"s": {"$concat": ["$s", "$s"]}}}`` repeated
   over stages grows exponentially).
5. growth per request: the ``$concat``/``$concatArrays`` outside loops may together make
   a value at most ``MAX_CONCAT_GROWTH`` times larger (the product of how many values each
   joins: doubling through an alias, ``{"$set": {"b": "$a"}}`` then
   ``{"$concat": ["$a", "$b"]}``, stops after a few stages); ``$replaceAll`` with
   written-out strings may lengthen a string at most ``MAX_REPLACE_GROWTH`` times, and
   ``find`` may not be empty.
6. ``$densify``: explicit ``bounds`` with at most ``MAX_DENSIFY_STEPS`` steps
   (``sandbox_growth_parts``).

Left to the servers' own limits: a cross product by ``$lookup`` without a join
condition, ``$unwind`` of large arrays, ``$setWindowFields`` collecting whole windows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.sandbox_growth_parts import (
    LOOPS,
    bound_names,
    check_densify,
    check_repeats,
    contains,
    is_int,
    is_literal,
    replace_ratio,
    strings,
)
from storage.sandbox_rules import SandboxError

MAX_RANGE = 500
MAX_LOOP_LITERAL = 20
MAX_LOOP_BODY = 300
"""Characters of JSON in the per-element expression of a loop over a ``$range``."""
MAX_REPLACE_GROWTH = 100
MAX_CONCAT_GROWTH = 100

BUILDERS = frozenset({"$concat", "$concatArrays", "$setUnion", "$mergeObjects", "$arrayToObject"})
ALWAYS_VARIABLES = frozenset({"NOW", "CLUSTER_TIME", "REMOVE"})


@dataclass(frozen=True)
class _Scope:
    loop: str | None = None
    """The loop whose per-element expression this is, if any."""
    ranged: bool = False
    """That loop runs over a ``$range``: only its own variables may be used."""
    own: frozenset[str] = frozenset()


@dataclass
class _Walk:
    replace_growth: float = 1.0
    concat_growth: int = 1


def check_growth(node: Any, where: str) -> None:
    """Refuse expressions in ``node`` that can grow a value without bound; see module doc."""
    walk = _Walk()
    try:
        _visit(node, _Scope(), walk)
        if walk.concat_growth > MAX_CONCAT_GROWTH:
            raise SandboxError(
                f"its $concat/$concatArrays steps can make a value up to {walk.concat_growth:,} "
                f"times larger (the number of values each joins, multiplied); at most "
                f"{MAX_CONCAT_GROWTH} is allowed per query; split the work into several queries"
            )
        if walk.replace_growth > MAX_REPLACE_GROWTH:
            raise SandboxError(
                f"these $replaceAll steps can make a string up to {walk.replace_growth:,.0f} "
                f"times longer; at most {MAX_REPLACE_GROWTH} times is allowed per query"
            )
    except SandboxError as exc:
        raise SandboxError(f"{where}: {exc}") from None


def _visit(node: Any, scope: _Scope, walk: _Walk) -> None:
    if isinstance(node, str):
        if scope.ranged:
            _check_own_reference(node, scope)
    elif isinstance(node, list):
        for item in node:
            _visit(item, scope, walk)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$literal":
                continue
            if key == "$range":
                _check_range(value, scope)
            elif key in ("$concat", "$concatArrays"):
                check_repeats(key, value)
                if scope.loop is None and isinstance(value, list):
                    walk.concat_growth *= max(1, sum(not is_literal(v) for v in value))
            elif key == "$replaceAll":
                walk.replace_growth *= replace_ratio(value)
            elif key == "$densify":
                check_densify(value)
            if key in LOOPS and isinstance(value, Mapping):
                _visit_loop(key, value, scope, walk)
            elif key == "$let" and isinstance(value, Mapping):
                _visit(value.get("vars"), scope, walk)
                names = value["vars"].keys() if isinstance(value.get("vars"), Mapping) else ()
                _visit(value.get("in"), _with_own(scope, names), walk)
            else:
                _visit(value, scope, walk)


def _visit_loop(name: str, spec: Mapping[str, Any], scope: _Scope, walk: _Walk) -> None:
    if name == "$reduce":
        _check_reduce(spec)
    for key, value in spec.items():
        if key != LOOPS[name]:
            _visit(value, scope, walk)
    variable = "this" if name == "$reduce" else str(spec.get("as", "this"))
    own = {variable, "value"} if name == "$reduce" else {variable}
    source = spec.get("input")
    ranged = scope.ranged or (isinstance(source, Mapping) and "$range" in source)
    body = spec.get(LOOPS[name])
    if ranged and len(json.dumps(body, default=str)) > MAX_LOOP_BODY:
        raise SandboxError(
            f"the per-element expression of {name} over a $range is longer than "
            f"{MAX_LOOP_BODY} characters; it runs once per number, keep it small"
        )
    inner = _Scope(loop=name, ranged=ranged, own=scope.own | own)
    _visit(spec.get(LOOPS[name]), inner, walk)


def _with_own(scope: _Scope, names: Any) -> _Scope:
    return _Scope(scope.loop, scope.ranged, scope.own | frozenset(map(str, names)))


def _check_own_reference(text: str, scope: _Scope) -> None:
    if not text.startswith("$"):
        if len(text) > MAX_LOOP_LITERAL:
            raise SandboxError(
                f"{scope.loop} over a $range makes a {len(text):,}-character string per number; "
                f"strings there may be at most {MAX_LOOP_LITERAL} characters"
            )
        return
    name = text[2:].split(".")[0] if text.startswith("$$") else None
    if name is not None and (name in scope.own or name in ALWAYS_VARIABLES):
        return
    raise SandboxError(
        f"{scope.loop} over a $range may use only its own variables ($$this and those it "
        f'binds), not "{text[:60]}": that value would be copied once per number'
    )


def _check_range(args: Any, scope: _Scope) -> None:
    if scope.loop is not None:
        raise SandboxError(
            f"$range inside the per-element expression of {scope.loop} would build one array "
            "per element; build the range once, outside the loop"
        )
    if not isinstance(args, list) or len(args) not in (2, 3):
        return  # the server explains the shape
    start, end, step = (*args, 1)[:3]
    sized_end = isinstance(end, Mapping) and set(end) == {"$size"} and isinstance(end["$size"], str)
    if not (is_int(start) and is_int(step) and (is_int(end) or sized_end)):
        raise SandboxError(
            "$range bounds must be written as integers (the end may be "
            '{"$size": "$array"}), so its length is known before it runs'
        )
    if sized_end or step == 0:
        return
    count = max(0, math.ceil((end - start) / step))
    if count > MAX_RANGE:
        raise SandboxError(
            f"$range would make {count:,} numbers; at most {MAX_RANGE:,} are allowed"
        )


def _check_reduce(spec: Mapping[str, Any]) -> None:
    body = spec.get("in")
    uses = _value_uses(body)
    if uses > 1:
        raise SandboxError(
            "$reduce uses $$value more than once (or inside $let or a nested loop) in its "
            "in expression, which doubles the value at every step; use $$value once, e.g. "
            '{"$concat": ["$$value", "$$this"]}'
        )
    if not contains(body, BUILDERS):
        return
    allowed = {"value", "this", *ALWAYS_VARIABLES, *bound_names(body)}
    for text in strings(body):
        name = text[2:].split(".")[0] if text.startswith("$$") else None
        if text.startswith("$") and name not in allowed:
            raise SandboxError(
                f'$reduce may build its value only from $$value and $$this; "{text[:60]}" '
                "would be added once per element (compute it in an earlier stage)"
            )
        if not text.startswith("$") and len(text) > MAX_LOOP_LITERAL:
            raise SandboxError(
                f"$reduce adds a {len(text):,}-character string at every step; strings inside "
                f"a $reduce may be at most {MAX_LOOP_LITERAL} characters"
            )


def _value_uses(node: Any, weight: int = 1) -> int:
    """Uses of ``$$value`` in a ``$reduce``'s ``in``; inside ``$let`` or a loop, each counts 2."""
    if isinstance(node, str):
        return weight if node == "$$value" or node.startswith("$$value.") else 0
    if isinstance(node, list):
        return sum(_value_uses(item, weight) for item in node)
    if not isinstance(node, Mapping):
        return 0
    total = 0
    for key, value in node.items():
        if key == "$literal":
            continue
        if key in LOOPS and isinstance(value, Mapping):
            for part, inner in value.items():
                rebound = key == "$reduce" and part == "in"
                if not rebound:
                    total += _value_uses(inner, 2 if part == LOOPS[key] else weight)
        elif key == "$let" and isinstance(value, Mapping):
            total += _value_uses(value.get("vars"), 2) + _value_uses(value.get("in"), weight)
        else:
            total += _value_uses(value, weight)
    return total
