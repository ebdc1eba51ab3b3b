"""``web_search`` through Brave's REST API (the PyPI client is unusable; see DESIGN.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import aiohttp
from pydantic import BaseModel, Field, WithJsonSchema

from agent.context import RunContext
from agent.llm.untrusted import for_model
from agent.tools.base import Tool, ToolError, ToolResult
from channels.http_fetch import read_at_most
from storage.outside import Outside

ANSWER_LIMIT = 1024 * 1024
"""Bytes of the search service's answer read (ten results are some 50 kB)."""


class WebSearchArgs(BaseModel):
    query: Annotated[str, Field(min_length=1, max_length=400), WithJsonSchema({"type": "string"})]
    count: Annotated[
        int, Field(ge=1, le=10), WithJsonSchema({"type": "integer", "description": "1-10"})
    ] = 5


async def _web_search(args: WebSearchArgs, ctx: RunContext) -> ToolResult:
    settings = ctx.deps.settings
    if settings.brave_api_key is None:
        raise ToolError("web search is not configured (BRAVE_API_KEY is unset)")
    session = ctx.deps.http
    url = settings.brave_api_base_url.rstrip("/") + "/res/v1/web/search"
    headers = {
        "Accept": "application/json",
        "X-Subscription-Token": settings.brave_api_key.get_secret_value(),
    }
    try:
        async with session.get(
            url,
            params={"q": args.query, "count": str(args.count)},
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=15),
        ) as resp:
            if resp.status == 429:
                raise ToolError("web search rate limit reached; try again later")
            if resp.status != 200:
                raise ToolError(f"web search failed with HTTP {resp.status}")
            body, whole = await read_at_most(resp, ANSWER_LIMIT)
    except (aiohttp.ClientError, TimeoutError):
        raise ToolError("web search could not reach the search service") from None
    if not whole:
        raise ToolError(f"web search answered more than {ANSWER_LIMIT // 1024} kB; not read")
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise ToolError("web search gave an answer that is not a JSON object")
    results = (payload.get("web") or {}).get("results") or []
    found = [r for r in results[: args.count] if isinstance(r, dict)]
    if not found:
        return {"results": 0, "note": "no results; try other words"}
    # What the pages say is outside text: it comes in an untrusted block.
    lines = "\n\n".join(
        f"{n}. {_text(r.get('title'))}\n{_text(r.get('url'))}\n{_text(r.get('description'))}"
        for n, r in enumerate(found, 1)
    )
    said = Outside(lines, f"web search results for {args.query}")
    return {"results": len(found), "found": for_model(said)}


def _text(value: object) -> str:
    return " ".join(str(value).split()) if isinstance(value, str | int | float) else ""


WEB_SEARCH = Tool(
    name="web_search",
    guidance="web_search for current facts; cite the URLs you used.",
    description="Web search (Brave): title, url, snippet per result.",
    args=WebSearchArgs,
    handler=_web_search,
    writes=False,
    untrusted_result="web search results",
)
