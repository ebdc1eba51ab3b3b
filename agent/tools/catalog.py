"""Which tools a request gets: by trust tier and by what is available right now."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from agent.context import RunContext
from agent.tools import held
from agent.tools.base import Tool, Toolset
from agent.tools.db import DB_QUERY
from agent.tools.fetch import FETCH_URL
from agent.tools.memory import FORGET_MEMORY, SAVE_MEMORY, SEARCH_MEMORY, UPDATE_DB_SCHEMA
from agent.tools.settings import MANAGE_SETTINGS
from agent.tools.web import WEB_SEARCH

Availability = Callable[[RunContext], bool]
Offer = tuple[Tool[Any], Availability]
"""A tool, and the predicate that says when a run is offered it."""
Source = Callable[[RunContext], Iterable[Tool[Any]]]
"""Tools that change while the app runs (an MCP server's), asked for at every run."""
Ready = Callable[[RunContext], Awaitable[None] | None]
"""What a run waits for before its tools are chosen; None: nothing to wait for now."""
"""Waits until a source can answer for a run (MCP servers still connecting at start)."""


def always(_: RunContext) -> bool:
    return True


class ToolCatalog:
    """All tools the app knows, each with a predicate saying when it is offered; fixed
    when built (the composition root gathers every feature's tools first).

    The contact tier only ever gets tools marked ``writes=False``: a third party
    cannot make the agent write memory, the database, schedules or permissions,
    or send to anyone else. In the owner's runs, a tool that reads outside text
    (``untrusted_result``) holds the run's later acting calls (``agent.tools.held``),
    and the first such tool's guidance says so.
    """

    def __init__(
        self,
        offers: Iterable[Offer] = (),
        sources: Iterable[tuple[Source, Ready | None]] = (),
    ) -> None:
        """``offers`` in order, a later tool replacing an earlier one of its name;
        ``sources`` with what ``until_ready`` awaits before a run's tools are chosen."""
        entries: list[Offer] = []
        for tool, available in offers:
            entries = [(t, a) for t, a in entries if t.name != tool.name]
            entries.append((tool, available))
        self._entries = tuple(entries)
        listed = tuple(sources)
        self._sources = tuple(source for source, _ in listed)
        self._ready = tuple(ready for _, ready in listed if ready is not None)

    async def until_ready(self, ctx: RunContext) -> None:
        """Wait until every source can say which tools ``ctx`` gets (each bounds its wait)."""
        waits = self.waits(ctx)
        if waits:
            await asyncio.gather(*waits)

    def waits(self, ctx: RunContext) -> list[Awaitable[None]]:
        """What ``until_ready`` would wait for (nothing, nearly always: a run then
        chooses its tools at once, without waiting in ``until_ready``)."""
        return [w for ready in self._ready if (w := ready(ctx)) is not None]

    def __contains__(self, name: str) -> bool:
        return any(tool.name == name for tool, _ in self._entries)

    def for_context(self, ctx: RunContext) -> Toolset:
        chosen = [t for t, available in self._entries if available(ctx)]
        chosen += [t for source in self._sources for t in source(ctx)]
        if ctx.tier != "owner":
            chosen = [t for t in chosen if not t.writes]
        return Toolset(told_of_holding(chosen))


def told_of_holding(tools: list[Tool[Any]]) -> list[Tool[Any]]:
    """``tools``, the first that reads outside text carrying the line that says acting
    calls wait for the owner after it (when any offered tool could act)."""
    first = next((i for i, t in enumerate(tools) if t.untrusted_result), None)
    if first is None or not any(t.writes for t in tools):
        return tools
    tool = tools[first]
    line = held.GUIDANCE
    if any(t.name == "raise_alert" for t in tools):
        line += held.OWNER_MAY_ALERT

    def guidance(ctx: RunContext) -> str:
        own = tool.guidance_in(ctx).strip()
        return f"{own} {line}" if own else line

    return [*tools[:first], dataclasses.replace(tool, guidance_for=guidance), *tools[first + 1 :]]


def owner_only(ctx: RunContext) -> bool:
    """A tool that reads the owner's memory: never a contact's (it writes nothing, so
    the tier rule alone would offer it)."""
    return ctx.tier == "owner"


def settings_offered(ctx: RunContext) -> bool:
    """``manage_settings``: the owner's chats and cron jobs (the owner's own words), not
    a pulse (it must not change the quiet hours that hold it); the contact tier never
    gets it (``writes``)."""
    return ctx.kind != "pulse"


def mcp_ready(ctx: RunContext) -> Awaitable[None] | None:
    """Before an owner's run picks its tools: the servers still connecting at start-up
    have connected or failed (at most ``MCP_START_TIMEOUT_SECONDS``). A contact's run
    gets no MCP tools, and an app without MCP servers has none: neither waits (None)."""
    manager = ctx.deps.mcp
    if manager is not None and ctx.tier == "owner":
        return manager.until_settled()
    return None


def mcp_offered(ctx: RunContext) -> list[Tool[Any]]:
    """The MCP tools this run gets (``agent.tools.mcp.tools``): none for a contact, and
    none in an app without MCP servers, which never loads that module."""
    if ctx.deps.mcp is None or ctx.tier != "owner":
        return []
    from agent.tools.mcp.tools import mcp_tools

    return mcp_tools(ctx)


def core_catalog(offers: Iterable[Offer] = ()) -> ToolCatalog:
    """The tools every app has, then ``offers`` (the features'), in order; a later
    tool of the same name replaces an earlier one."""
    core: list[Offer] = [
        (SAVE_MEMORY, always),
        (SEARCH_MEMORY, owner_only),
        (FORGET_MEMORY, always),
        (UPDATE_DB_SCHEMA, always),
        (DB_QUERY, always),
        (WEB_SEARCH, lambda ctx: ctx.deps.settings.brave_api_key is not None),
        (FETCH_URL, always),
        (MANAGE_SETTINGS, settings_offered),
    ]
    return ToolCatalog([*core, *offers], sources=[(mcp_offered, mcp_ready)])
