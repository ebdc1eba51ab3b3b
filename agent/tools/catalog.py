"""Which tools a request gets: by trust tier and by what is available right now."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.context import RunContext
from agent.tools.base import Tool, Toolset
from agent.tools.db import DB_QUERY
from agent.tools.mcp.tools import mcp_ready, mcp_tools
from agent.tools.memory import SAVE_MEMORY, UPDATE_DB_SCHEMA
from agent.tools.settings import MANAGE_SETTINGS
from agent.tools.web import WEB_SEARCH

Availability = Callable[[RunContext], bool]
Offer = tuple[Tool[Any], Availability]
"""A tool, and the predicate that says when a run is offered it."""
Source = Callable[[RunContext], Iterable[Tool[Any]]]
"""Tools that change while the app runs (an MCP server's), asked for at every run."""
Ready = Callable[[RunContext], Awaitable[None]]
"""Waits until a source can answer for a run (MCP servers still connecting at start)."""


def always(_: RunContext) -> bool:
    return True


@dataclass
class ToolCatalog:
    """All tools the app knows, each with a predicate saying when it is offered.

    The contact tier only ever gets tools marked ``writes=False``: a third party
    cannot make the agent write memory, the database, schedules or permissions,
    or send to anyone else.
    """

    _entries: list[tuple[Tool[Any], Availability]] = field(default_factory=list)
    _sources: list[Source] = field(default_factory=list)
    _ready: list[Ready] = field(default_factory=list)

    def add(self, tool: Tool[Any], available: Availability = always) -> None:
        self._entries = [(t, a) for t, a in self._entries if t.name != tool.name]
        self._entries.append((tool, available))

    def add_source(self, source: Source, ready: Ready | None = None) -> None:
        """``ready``, when given, is awaited by ``until_ready`` before a run's tools are chosen."""
        self._sources.append(source)
        if ready is not None:
            self._ready.append(ready)

    async def until_ready(self, ctx: RunContext) -> None:
        """Wait until every source can say which tools ``ctx`` gets (each bounds its wait)."""
        if self._ready:
            await asyncio.gather(*(ready(ctx) for ready in self._ready))

    def __contains__(self, name: str) -> bool:
        return any(tool.name == name for tool, _ in self._entries)

    def for_context(self, ctx: RunContext) -> Toolset:
        chosen = [t for t, available in self._entries if available(ctx)]
        chosen += [t for source in self._sources for t in source(ctx)]
        if ctx.tier != "owner":
            chosen = [t for t in chosen if not t.writes]
        return Toolset(chosen)


def settings_offered(ctx: RunContext) -> bool:
    """``manage_settings``: the owner's chats and cron jobs (the owner's own words), not
    a pulse (it must not change the quiet hours that hold it); the contact tier never
    gets it (``writes``)."""
    return ctx.kind != "pulse"


def core_catalog(offers: Iterable[Offer] = ()) -> ToolCatalog:
    """The tools every app has, then ``offers`` (the features'), in order; a later
    tool of the same name replaces an earlier one."""
    catalog = ToolCatalog()
    catalog.add(SAVE_MEMORY)
    catalog.add(UPDATE_DB_SCHEMA)
    catalog.add(DB_QUERY)
    catalog.add(WEB_SEARCH, lambda ctx: ctx.deps.settings.brave_api_key is not None)
    catalog.add(MANAGE_SETTINGS, settings_offered)
    catalog.add_source(mcp_tools, mcp_ready)
    for tool, available in offers:
        catalog.add(tool, available)
    return catalog
