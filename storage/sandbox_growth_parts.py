"""Per-operator helpers of ``sandbox_growth``: what a ``$concat`` copies, ``$replaceAll``
ratios, ``$densify`` step counts, and small questions about expression trees (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from storage.ejson import from_ejson
from storage.sandbox_rules import SandboxError

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
