"""Tools: a typed argument model, a description, and an async handler.

The JSON schema sent to the model is generated from the pydantic model and
compacted (no titles, references inlined) to keep every request lean.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from agent.context import RunContext
from agent.llm.types import ToolSpec
from storage.ejson import INT64_MAX, oversized_int

log = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)
ToolResult = dict[str, Any]


class ToolError(Exception):
    """A failure the model should read: the message becomes ``{"error": message}``."""


@dataclass(frozen=True)
class Tool(Generic[A]):
    name: str
    description: str
    args: type[A]
    handler: Callable[[A, RunContext], Awaitable[ToolResult]]
    writes: bool = True
    """Whether the tool changes state or reaches others (refused to the contact tier)."""
    guidance: str = ""
    """One line for the system prompt's tool section, sent only while the tool is offered."""
    guidance_for: Callable[[RunContext], str] | None = None
    """The line, when it depends on the run (what is configured): wins over ``guidance``."""
    untrusted_result: str = ""
    """What outside text the result is ("web search results"), when it is some: the
    first such tool offered carries the line saying acting calls wait after it. What
    marks a run is the untrusted block itself, where the loop builds a request."""
    acting: Callable[[A], bool] | None = None
    """Whether a call (its checked arguments) changes settings, memory, schedules,
    permissions or the owner's data, raises an alert or sends; None: ``writes`` says.
    Reads (a find, a list) stay free after outside text."""
    owner_may: bool = False
    """Whether the call stays free after outside text in a run the owner's own words
    started (``RunContext.owner_words``): ``raise_alert``, whose handler then bounds the
    severity and quotes what was read (an owner's job may alert the owner)."""

    def guidance_in(self, ctx: RunContext) -> str:
        return self.guidance_for(ctx) if self.guidance_for is not None else self.guidance

    def holds(self, raw: dict[str, Any], ctx: RunContext) -> bool:
        """Whether a call with ``raw`` waits for the owner once its run has read outside
        text: when it acts (``acting``), unless the owner's own words started the run and
        the tool is one the owner may have (``owner_may``); arguments that do not
        validate act on nothing (the call answers with their error)."""
        if self.owner_may and ctx.owner_words is not None:
            return False
        if self.acting is None:
            return self.writes
        try:
            args = self.args.model_validate(raw)
        except ValidationError:
            return False
        return self.acting(args)

    def spec(self) -> ToolSpec:
        """What the model is told of this tool: one spec per name, description and
        arguments, shared by every request (read it, never change it)."""
        return _spec(self.name, self.description, self.args)

    async def invoke(self, raw: dict[str, Any], ctx: RunContext) -> ToolResult:
        huge = oversized_int(raw)
        if huge is not None:  # nothing could store it: refused before the tool runs
            return {
                "error": f"invalid arguments for {self.name}: {huge}: integer too large "
                f"(max {INT64_MAX}); send it as a string"
            }
        try:
            args = self.args.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return {"error": f"invalid arguments for {self.name}: {problems}"}
        try:
            result: ToolResult = local_times(await self.handler(args, ctx), ctx.tz)
            return result
        except ToolError as exc:
            return {"error": str(exc)}
        except Exception:
            log.exception("tool %s failed", self.name)
            return {"error": f"{self.name} failed unexpectedly; try a different approach"}


class Toolset:
    """The tools offered for one request, by name."""

    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {t.name: t for t in tools}

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self._tools.values()]

    def acts(self, name: str) -> bool:
        """Whether calling ``name`` changes state or reaches others."""
        tool = self._tools.get(name)
        return tool is not None and tool.writes

    def holds(self, name: str, arguments: dict[str, Any], ctx: RunContext) -> bool:
        """Whether this call waits for the owner once the run has read outside text."""
        tool = self._tools.get(name)
        return tool is not None and tool.holds(arguments, ctx)

    def untrusted_result(self, name: str) -> str:
        """What outside text calling ``name`` reads, or "" (see ``Tool.untrusted_result``)."""
        tool = self._tools.get(name)
        return tool.untrusted_result if tool is not None else ""

    def only(self, predicate: Callable[[Tool[Any]], bool]) -> Toolset:
        return Toolset(t for t in self._tools.values() if predicate(t))

    async def call(self, name: str, arguments: dict[str, Any], ctx: RunContext) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            return {"error": f"unknown tool {name!r}; available: {', '.join(self._tools)}"}
        return await tool.invoke(arguments, ctx)


@lru_cache(maxsize=512)
def _spec(name: str, description: str, args: type[BaseModel]) -> ToolSpec:
    """``Tool.spec``, built once: what a request measures of it (``request_bytes``) is
    then measured once too, not at every model call."""
    return ToolSpec(name=name, description=description, parameters=compact_schema(args))


@lru_cache(maxsize=256)
def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The compact schema of ``model``; generated once per model class (it is pure).

    One shared dict per class, sent with every request: read it, never change it
    (the adapters only serialise it; ``tests/agent/tools/test_schema_shared.py``)."""
    return _compact_fresh(model)


def _compact_fresh(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return _compact(schema, defs)  # type: ignore[no-any-return]


def _compact(node: Any, defs: dict[str, Any]) -> Any:
    """Inline ``$ref``s, drop schema ``title``s and null or empty-text defaults, collapse
    ``X | None``.

    Keys of a ``properties`` mapping are argument names, never schema keywords: an
    argument called ``title`` must survive.
    """
    if isinstance(node, list):
        return [_compact(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _compact(defs[node["$ref"].split("/")[-1]], defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value in (None, "")):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _compact(prop, defs) for name, prop in value.items()}
            continue
        if key == "anyOf":
            options = [o for o in value if o != {"type": "null"}]
            if len(options) == 1:
                out.update(_compact(options[0], defs))
                continue
        out[key] = _compact(value, defs)
    return out


def local_times(value: Any, tz: tzinfo) -> Any:
    """``value`` with every datetime as ISO 8601 text in ``tz``, with its offset.

    A model reads times the way the owner says them, and a bare ``str(datetime)``
    (``2026-11-26 05:46:04.243000+00:00``) invited it to relay UTC as local time. A
    naive datetime is UTC, as MongoDB stores and pymongo reads it.
    """
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.astimezone(tz).isoformat(timespec="seconds")
    if isinstance(value, dict):
        return {k: local_times(v, tz) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [local_times(v, tz) for v in value]
    return value


def result_json(result: ToolResult, tz: tzinfo = UTC) -> str:
    """A tool result as the JSON a model reads, times in ``tz`` (the owner's ``ctx.tz``)."""
    return json.dumps(local_times(result, tz), ensure_ascii=False, default=str)
