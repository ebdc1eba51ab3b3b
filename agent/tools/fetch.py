"""``fetch_url``: a web page's readable text, for the model, as outside text.

The same network rules as monitors (``scheduler.monitors.monitor.check_url``: an
http(s) URL with a host); bounded in time (for the whole exchange,
redirects included), in bytes read (the rest is never received) and in the text handed
on (``FetchLimits``); the page is read as ``change`` monitors read it
(``scheduler.monitors.page``). What the page says comes in an untrusted block, and
the call itself is owner-only and waits for the owner after outside text in its run
(``writes``): a URL can carry data out as well as bring it in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field, WithJsonSchema

from agent.context import RunContext
from agent.llm.untrusted import EXTERNAL, for_model
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.monitors.monitor import URL_LIMIT, check_url
from scheduler.monitors.page import PageError, get_page, readable
from storage.outside import Outside
from storage.repos.monitor_record import MonitorError

USER_AGENT = "Watchkeeper-fetch/1"


@dataclass(frozen=True)
class FetchLimits:
    """How much one fetch may take (tests shorten them)."""

    seconds: float = 15.0
    """The whole exchange, redirects included."""
    max_bytes: int = 2 * 1024 * 1024
    """Bytes of the answer read; the rest is never received."""
    max_chars: int = 12_000
    """Characters of the page's text handed to the model (about 3,000 tokens)."""


class FetchUrlArgs(BaseModel):
    url: Annotated[
        str,
        Field(min_length=1, max_length=URL_LIMIT),
        WithJsonSchema({"type": "string"}),
    ]


async def fetch_page(args: FetchUrlArgs, ctx: RunContext, limits: FetchLimits) -> ToolResult:
    """The page at ``args.url`` as the tool answers it; ``ToolError`` says why not."""
    try:
        url = check_url(args.url)
    except MonitorError as exc:
        raise ToolError(str(exc)) from None
    try:
        page = await get_page(ctx.deps.http, url, limits.seconds, limits.max_bytes, USER_AGENT)
    except PageError as exc:
        raise ToolError(str(exc)) from None
    title, text = await asyncio.to_thread(readable, page.body, page.html)  # beside the loop
    cut = len(text) > limits.max_chars or not page.whole
    text = text[: limits.max_chars]
    shown = f"{title}\n\n{text}" if title else text
    result: ToolResult = {
        "url": page.url,
        "status": page.status,
        "chars": len(text),
        "page": for_model(Outside(shown, f"the page at {page.url}")),
    }
    if cut:
        result["note"] = f"only the first {len(text)} characters of the page's text"
    if not text:
        result["note"] = "the page has no readable text (it may need a browser to render it)"
    return result


def fetch_url_tool(limits: FetchLimits | None = None) -> Tool[FetchUrlArgs]:
    """The ``fetch_url`` tool with these limits (the defaults: ``FETCH_URL``)."""
    bounds = limits or FetchLimits()

    async def handler(args: FetchUrlArgs, ctx: RunContext) -> ToolResult:
        return await fetch_page(args, ctx, bounds)

    return Tool(
        name="fetch_url",
        description=f"An http(s) page's text, in an <{EXTERNAL}> block.",
        args=FetchUrlArgs,
        handler=handler,
        writes=True,  # owner only; waits after outside text: a URL can carry data out
        untrusted_result="a fetched web page",
    )


FETCH_URL = fetch_url_tool()
