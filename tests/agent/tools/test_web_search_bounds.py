"""``web_search`` reads the search service's answer bounded in bytes: a service (or
whatever answers at ``BRAVE_API_BASE_URL``) cannot fill the agent's memory."""

from __future__ import annotations

from typing import Any

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.tools.web import ANSWER_LIMIT, WEB_SEARCH
from tests.conftest import make_settings
from tests.contexts import agent_deps, owner_ctx
from tests.fakes.huge_answer import MIB, huge_answer


async def test_a_huge_search_answer_is_refused_after_a_bounded_read(
    db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    async with huge_answer(256 * MIB) as service:
        base = service.url.removesuffix("/check")
        settings = make_settings(brave_api_key="brave-test", brave_api_base_url=base)
        ctx = owner_ctx(agent_deps(settings, db, http))
        result = await WEB_SEARCH.invoke({"query": "storm warnings"}, ctx)
        await service.done.wait()
    assert result == {"error": f"web search answered more than {ANSWER_LIMIT // 1024} kB; not read"}
    assert service.sent < ANSWER_LIMIT + 16 * MIB
