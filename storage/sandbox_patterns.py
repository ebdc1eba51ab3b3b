"""Every place a regular expression can hide in a ``db_query`` argument, each one checked.

A pattern reaches the server as ``{"$regex": ..., "$options": ...}`` in a filter (also
inside ``$in``/``$nin``/``$not``/``$elemMatch``/``$and``/``$or``/``$nor``, ``$pull``
conditions, ``$lookup`` sub-pipelines), as an Extended JSON ``$regularExpression`` (or a
BSON/Python regex object once converted), as the ``regex`` of ``$regexMatch``,
``$regexFind`` and ``$regexFindAll`` (in pipelines and ``$expr``), and as ``pattern`` or
``patternProperties`` in a ``$jsonSchema``. The walk does not care where it is: any of
these shapes at any depth is checked with ``sandbox_regex.check_pattern``.

An aggregation regex must be written out: one read from a document (``"$field"``,
``"$$var"``) or computed by an expression cannot be checked, so it is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bson.regex import Regex

from storage.sandbox_regex import check_pattern
from storage.sandbox_rules import SandboxError

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
