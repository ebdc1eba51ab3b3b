"""How large a value the model's query may make: expressions that could grow a value
without bound are refused up front, and a write may not leave a value longer than one
answer can show.

The embedded SecantusDB runs every stage over all documents at once, so a pipeline that
doubles a string with ``$reduce``/``$concat`` fills memory before any size check. The
rules for one request (pure, refusals only; no expression is rewritten):

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
6. ``$densify``: explicit ``bounds`` with at most ``MAX_DENSIFY_STEPS`` steps.

Left to the servers' own limits: a cross product by ``$lookup`` without a join
condition, ``$unwind`` of large arrays, ``$setWindowFields`` collecting whole windows.

Those bound one request, not a series: accepted updates that each double a string
through an alias would still grow it without end. So what a write leaves behind is
bounded too:

7. every string written out in a write's ``data``, ``update`` or output pipeline is at
   most ``MAX_STRING_CHARS`` characters (pure);
8. a write that builds values from stored ones (an update pipeline, or an aggregate
   ending in ``$out``/``$merge``, using ``BUILDERS``) is first run as a read with the
   same stages, and refused, with nothing written, when a document it would leave is
   over ``MAX_BUILT_BYTES``: the largest row ``db_query`` can read back. For
   ``updateOne`` every matching document is tried, not only the one it would change.
   What cannot be tried that way may not build values: an upsert (it inserts what the
   filter and the pipeline make) and a ``$merge`` ``whenMatched`` pipeline.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.ejson import from_ejson, to_ejson
from storage.sandbox.read import MAX_ROW_BYTES
from storage.sandbox.rules import SandboxError

Doc = dict[str, Any]

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


# Per-operator helpers: what a ``$concat`` copies, ``$replaceAll`` ratios, ``$densify``
# step counts, and small questions about expression trees.

MAX_DENSIFY_STEPS = 1_000
LOOPS: Mapping[str, str] = {"$map": "in", "$filter": "cond", "$reduce": "in"}
"""Iterating operators and their per-element expression."""
COPIED_VARIABLES = ("$$ROOT", "$$CURRENT", "$$value")
# Operators whose result is a number, a boolean or a short string: what they read is
# not copied into a concatenation.
# fmt: off
SCALAR_OPERATORS = frozenset({
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$cmp", "$and", "$or", "$not", "$in",
    "$type", "$isArray", "$isNumber", "$strLenCP", "$strLenBytes", "$size", "$indexOfCP",
    "$indexOfBytes", "$indexOfArray", "$strcasecmp", "$regexMatch", "$bsonSize", "$binarySize",
    "$add", "$subtract", "$multiply", "$divide", "$mod", "$abs", "$ceil", "$floor", "$round",
    "$trunc", "$pow", "$sqrt", "$exp", "$ln", "$log", "$log10", "$sum", "$avg", "$min", "$max",
    "$toInt", "$toLong", "$toDouble", "$toDecimal", "$toBool", "$toDate", "$dateToString",
    "$dateFromString", "$dateFromParts", "$dateAdd", "$dateSubtract", "$dateDiff", "$dateTrunc",
    "$year", "$month", "$dayOfMonth", "$dayOfWeek", "$dayOfYear", "$hour", "$minute", "$second",
    "$millisecond", "$week", "$isoWeek", "$isoWeekYear", "$isoDayOfWeek", "$setIsSubset",
    "$setEquals", "$allElementsTrue", "$anyElementTrue", "$rand", "$literal",
})
# fmt: on
UNIT_MS: Mapping[str, float] = {
    "millisecond": 1,
    "second": 1e3,
    "minute": 6e4,
    "hour": 3.6e6,
    "day": 8.64e7,
    "week": 6.048e8,
    "month": 28 * 8.64e7,
    "quarter": 89 * 8.64e7,
    "year": 365 * 8.64e7,
}  # fmt: skip
"""The shortest length of each ``$densify`` unit, so step counts are never underestimated."""


def check_repeats(operator: str, operands: Any) -> None:
    if not isinstance(operands, list):
        return
    seen: set[str] = set()
    for reference in (r for operand in operands for r in _copied(operand)):
        if reference in seen:
            raise SandboxError(
                f'{operator} takes "{reference[:60]}" more than once, which doubles it each time '
                "it runs (a stage or $reduce step that repeats it grows exponentially); use "
                "each value once"
            )
        seen.add(reference)


def _copied(node: Any) -> list[str]:
    """Fields and whole-document variables whose value ends up in ``node``'s result."""
    if isinstance(node, str):
        copied = node.startswith("$") and not node.startswith("$$")
        return [node] if copied or node.startswith(COPIED_VARIABLES) else []
    if isinstance(node, list):
        return [r for item in node for r in _copied(item)]
    if not isinstance(node, Mapping):
        return []
    if len(node) == 1 and (key := next(iter(node))).startswith("$"):
        spec = node[key]
        if key in SCALAR_OPERATORS:
            return []
        if key == "$cond":
            return _copied(spec[1:] if isinstance(spec, list) else _pick(spec, "then", "else"))
        if key == "$switch" and isinstance(spec, Mapping):
            branches = spec.get("branches")
            thens = (
                [b.get("then") for b in branches if isinstance(b, Mapping)]
                if isinstance(branches, list)
                else []
            )
            return _copied([*thens, spec.get("default")])
        if key in LOOPS or key == "$let":
            return _copied(_pick(spec, "input", "initialValue", "in" if key == "$let" else ""))
    return _copied(list(node.values()))


def _pick(spec: Any, *keys: str) -> list[Any]:
    return [spec.get(k) for k in keys if k] if isinstance(spec, Mapping) else []


def replace_ratio(spec: Any) -> float:
    if not isinstance(spec, Mapping):
        return 1.0
    find, replacement = spec.get("find"), spec.get("replacement")
    if find == "":
        raise SandboxError("$replaceAll needs a non-empty find string")
    if isinstance(find, str) and isinstance(replacement, str):
        return max(1.0, len(replacement) / len(find))
    return 1.0


def check_densify(spec: Any) -> None:
    refusal = SandboxError(
        '$densify needs "range": {"step": n, "bounds": [low, high]} written out (not "full" '
        f'or "partition"), with at most {MAX_DENSIFY_STEPS:,} steps'
    )
    window = spec.get("range") if isinstance(spec, Mapping) else None
    bounds = window.get("bounds") if isinstance(window, Mapping) else None
    if not isinstance(bounds, list) or len(bounds) != 2:
        raise refusal
    step = window.get("step") if isinstance(window, Mapping) else None
    try:
        low, high = (from_ejson(b) for b in bounds)
    except ValueError:
        raise refusal from None
    if not isinstance(step, int | float) or isinstance(step, bool) or step <= 0:
        raise refusal
    if isinstance(low, datetime) and isinstance(high, datetime):
        unit = window.get("unit") if isinstance(window, Mapping) else None
        span = (high - low).total_seconds() * 1000 / UNIT_MS.get(str(unit), 1)
    elif all(isinstance(b, int | float) and not isinstance(b, bool) for b in (low, high)):
        span = float(high - low)
    else:
        raise refusal
    if span / step > MAX_DENSIFY_STEPS:
        raise refusal


def bound_names(node: Any) -> set[str]:
    """Variables bound inside ``node`` by ``$let`` and by loops' ``as``."""
    names: set[str] = set()
    if isinstance(node, list):
        for item in node:
            names |= bound_names(item)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            if (
                key == "$let"
                and isinstance(value, Mapping)
                and isinstance(value.get("vars"), Mapping)
            ):
                names |= set(map(str, value["vars"]))
            elif key in LOOPS and isinstance(value, Mapping):
                names.add(str(value.get("as", "this")))
            names |= bound_names(value)
    return names


def is_literal(value: Any) -> bool:
    """A value written out in the query (not read from a field or variable)."""
    if isinstance(value, str):
        return not value.startswith("$")
    return not isinstance(value, Mapping | list)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def contains(node: Any, operators: frozenset[str]) -> bool:
    if isinstance(node, list):
        return any(contains(item, operators) for item in node)
    if isinstance(node, Mapping):
        return any(k in operators or contains(v, operators) for k, v in node.items())
    return False


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    if isinstance(node, Mapping):
        return [s for k, v in node.items() if k != "$literal" for s in strings(v)]
    return []


# What a write leaves behind (rules 7 and 8).

MAX_STRING_CHARS = 16_000
"""A string longer than one ``db_query`` answer could never be read back whole."""
MAX_BUILT_BYTES = MAX_ROW_BYTES
BUILDING = BUILDERS | {"$replaceAll", "$replaceOne"}
"""Operators whose result can be longer than what they read."""
SIZE = "_db_query_size"


def check_written_strings(value: Any, where: str) -> None:
    """Refuse a string over ``MAX_STRING_CHARS`` anywhere in ``value`` (a write's argument)."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, str) and len(node) > MAX_STRING_CHARS:
            raise SandboxError(
                f"{where}: a string of {len(node):,} characters; db_query stores strings of "
                f"at most {MAX_STRING_CHARS:,} characters (split the text over several "
                "fields or documents)"
            )
        if isinstance(node, Mapping):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def builds(stages: Any) -> bool:
    """``stages`` can make a value longer than what it reads (see ``BUILDING``)."""
    return contains(stages, frozenset(BUILDING))


def check_untried_building(update: Any, upsert: bool, pipeline: Any) -> None:
    """Refuse the building writes that cannot be tried first (rule 8)."""
    if upsert and isinstance(update, list) and builds(update):
        raise SandboxError(
            "update: an upsert cannot build values with $concat and the like (what it would "
            "insert cannot be checked first); insert the document, then update it"
        )
    last = pipeline[-1] if isinstance(pipeline, list) and pipeline else None
    merge = last.get("$merge") if isinstance(last, Mapping) else None
    if isinstance(merge, Mapping) and builds(merge.get("whenMatched")):
        raise SandboxError(
            "pipeline: a $merge whenMatched pipeline may not build values with $concat and "
            "the like; compute them in the stages before $merge"
        )


async def check_built_sizes(
    db: AsyncDatabase[Doc], collection: str, stages: list[Doc], what: str, comment: str
) -> None:
    """Run ``stages`` as a read and refuse when a document they make is over
    ``MAX_BUILT_BYTES`` (rule 8); ``what`` names the write in the message."""
    probe = [
        *stages,
        {"$project": {SIZE: {"$bsonSize": "$$ROOT"}}},
        {"$match": {SIZE: {"$gt": MAX_BUILT_BYTES}}},
        {"$limit": 1},
    ]
    cursor = await db[collection].aggregate(probe, comment=comment)
    found = await cursor.to_list(1)
    if found:
        shown = str(to_ejson(found[0].get("_id")))[:60]
        raise SandboxError(
            f"{what} would leave a document of {found[0][SIZE]:,} bytes (_id {shown}); a "
            f"write that builds values ($concat and the like) may leave documents of at most "
            f"{MAX_BUILT_BYTES:,} bytes, the largest row db_query can read back; nothing "
            "was written: keep long text in several documents"
        )
