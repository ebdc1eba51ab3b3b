"""A plain "hi" from the owner with every owner tool and two MCP servers of ten tools
each: past ``MCP_TOOL_TOKEN_BUDGET`` they cost two tools (``mcp_find_tools``,
``mcp_call``), and the request stays under 3,000 tokens. Offered directly, the same
tools would cost far more (printed with ``-s``)."""

from __future__ import annotations

import uuid
from pathlib import Path

from neonize.proto.Neonize_pb2 import Connected

from agent.app.alerts_feature import AlertingOptions, alerting
from agent.app.core import build_app
from agent.app.scheduling_feature import SchedulingOptions, scheduling
from agent.app.whatsapp_feature import make_whatsapp_feature
from agent.tools.mcp_client import McpServers
from tests.agent.conversation.test_hi_tokens import OWNER_TOOLS, hi_tokens
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.fakes.channel import RecordingChannel
from tests.fakes.mcp_kit import http_server, stdio_server
from tests.fakes.scripted import ScriptedModel
from tests.fakes.whatsapp import FakeClient

HI_WITH_MCP_BUDGET = 3_000


async def test_hi_with_two_mcp_servers_stays_under_budget(
    mongo_server: str, tmp_path: Path
) -> None:
    clients: list[FakeClient] = []

    def factory(path: str) -> FakeClient:
        clients.append(FakeClient(path))
        return clients[-1]

    settings = make_settings(
        mongodb_uri=mongo_server + "?directConnection=true",
        mongodb_db=f"hi_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        whatsapp_enabled=True,
        owner_phone="+4915100000001",
        owner_telegram_ids=[42],
        brave_api_key="brave-test",
        timezone="Europe/Berlin",
    )
    model = ScriptedModel(lambda r: "hello")
    features = [
        alerting(AlertingOptions(background=False)),
        scheduling(SchedulingOptions(timer=False)),
        make_whatsapp_feature(factory, burst_seconds=0.2, health_every=3600),
    ]
    channels = [RecordingChannel("telegram", sender=42)]
    async with (
        http_server("web", extra=4) as web,
        build_app(settings, model=model, channels=list(channels), features=features) as app,
    ):
        manager = McpServers([stdio_server("files", extra=4), web.config()], start_timeout=20)
        await manager.start()
        try:
            assert [
                len([t for t in manager.tools() if t.server == s]) for s in ("files", "web")
            ] == [10, 10]
            await clients[0].emit(Connected())
            app.deps.mcp = manager
            await app.agent.respond("hi", owner_ctx(app.deps))
            app.deps.settings = settings.model_copy(update={"mcp_tool_token_budget": 100_000})
            await app.agent.respond("hi", owner_ctx(app.deps))
        finally:
            await manager.stop()
            await app.database.client.drop_database(settings.mongodb_db)
    found, direct = model.requests[0], model.requests[1]
    assert set(found.tool_names) >= OWNER_TOOLS | {"mcp_find_tools", "mcp_call"}
    assert sum("__" in n for n in direct.tool_names) == 20
    tokens, direct_tokens = hi_tokens(found), hi_tokens(direct)
    print(f"\nhi with 2x10 MCP tools: find/call {tokens} tokens, direct {direct_tokens} tokens")
    assert tokens < HI_WITH_MCP_BUDGET, tokens
    assert direct_tokens > tokens
