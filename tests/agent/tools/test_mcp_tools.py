"""MCP tools through the agent, against real MCP servers (the SDK's ``MCPServer``): one
over stdio, one over streamable HTTP on loopback, behind the app's ``McpServers``.

The model is scripted; everything between it and the servers is the real loop, catalog,
effect log and database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.llm.types import ModelMessage
from agent.tools.catalog import core_catalog
from agent.tools.mcp.client import McpServers
from agent.tools.mcp.config import ServerConfig
from tests.conftest import make_settings
from tests.contexts import agent_deps, contact_ctx, owner_ctx
from tests.fakes.mcp_kit import http_server, stdio_server
from tests.fakes.scripted import Request, ScriptedModel, sequence

pytestmark = pytest.mark.timeout(120)


@asynccontextmanager
async def running(*configs: ServerConfig, call_timeout: float = 5.0) -> AsyncIterator[McpServers]:
    manager = McpServers(list(configs), start_timeout=20, call_timeout=call_timeout)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


@pytest.fixture(scope="module")
async def effects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "effects.txt"


@pytest.fixture(scope="module")
async def servers(effects: Path) -> AsyncIterator[McpServers]:
    """``files`` over stdio and ``web`` over HTTP, ten tools each, for the whole module."""
    async with (
        http_server("web", effects=effects, extra=4) as web,
        # "files" is trusted for reads: its read-only tools stay free after a result.
        running(stdio_server("files", effects, 4, trust_read=True), web.config()) as manager,
    ):
        assert sorted(manager.connected()) == ["files", "web"], manager.status()
        yield manager


def make_deps(
    db: AsyncDatabase[dict[str, Any]],
    http: aiohttp.ClientSession,
    manager: McpServers,
    budget: int,
) -> AgentDeps:
    return agent_deps(make_settings(mcp_tool_token_budget=budget), db, http, mcp=manager)


def results(request: Request) -> list[dict[str, Any]]:
    """The tool results the model was sent back, in order."""
    return [p.result for m in request.messages if m.role == "tool" for p in m.parts]  # type: ignore[union-attr]


def last_result(model: ScriptedModel) -> dict[str, Any]:
    return results(model.requests[-1])[-1]


async def test_tools_offered_directly_under_the_budget_and_called(
    servers: McpServers, db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        model.call("web__add", a=2, b=40), model.call("files__echo", text="hello"), "done"
    )
    deps = make_deps(db, http, servers, budget=100_000)
    reply = await Agent(model, core_catalog()).respond("add", owner_ctx(deps))
    names = model.requests[0].tool_names
    assert {f"{s}__{t}" for s in ("files", "web") for t in ("echo", "add", "record")} <= set(names)
    assert "mcp_call" not in names and "mcp_find_tools" not in names
    spec = next(t for t in model.requests[0].tools if t.name == "web__add")
    assert spec.parameters["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    added, echoed = results(model.requests[-1])
    assert (
        "42" in added["result"]
        and 'from="the result of the MCP tool web/add" trust="untrusted"' in added["result"]
    )
    assert "hello" in echoed["result"]
    assert "<external_content>" in model.requests[0].system.replace(" blocks", "")
    assert reply.text == "done" and reply.tool_calls == ["web__add", "files__echo"]


async def test_past_the_budget_the_model_finds_then_calls(
    servers: McpServers, db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        model.call("mcp_find_tools", query="add integers"),
        model.call("mcp_call", server="files", tool="add", arguments={"a": 1, "b": 2}),
        model.call("mcp_call", server="files", tool="add", arguments={"a": "x"}),
        model.call("mcp_call", server="nowhere", tool="add", arguments={}),
        "done",
    )
    deps = make_deps(db, http, servers, budget=200)
    await Agent(model, core_catalog()).respond("add", owner_ctx(deps))
    names = model.requests[0].tool_names
    assert "mcp_find_tools" in names and "mcp_call" in names
    assert not any("__" in n for n in names)
    found, called, invalid, unknown = results(model.requests[-1])
    assert [(t["server"], t["tool"]) for t in found["tools"]][:2] == [
        ("files", "add"),
        ("web", "add"),
    ]
    assert found["tools"][0]["input_schema"]["required"] == ["a", "b"]
    assert "3" in called["result"]
    assert "MCP files/add failed" in invalid["error"] and "valid integer" in invalid["error"]
    assert "no MCP server named 'nowhere'" in unknown["error"]


async def test_a_timeout_is_our_plain_error_and_a_failing_tool_is_the_servers_words(
    servers: McpServers, db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        model.call("web__slow", seconds=30), model.call("files__fail", message="boom"), "ok"
    )
    deps = make_deps(db, http, servers, budget=100_000)
    reply = await Agent(model, core_catalog()).respond("slow", owner_ctx(deps))
    slow, failed = results(model.requests[-1])
    assert slow == {"error": "web__slow did not answer within 5 seconds"}  # ours: plain
    assert failed == {
        "error": 'MCP files/fail failed: <external_content from="the error of the MCP tool '
        'files/fail" '
        'trust="untrusted">\nError executing tool fail: boom\n</external_content>'
    }
    assert reply.text == "ok"


async def test_a_contact_never_sees_mcp_tools(
    servers: McpServers, db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    model = ScriptedModel(lambda r: "hello")
    agent = Agent(model, core_catalog())
    for budget in (100_000, 10):
        deps = make_deps(db, http, servers, budget=budget)
        await agent.respond("use your tools", contact_ctx(deps))
        assert not any("__" in n or n.startswith("mcp_") for n in model.requests[-1].tool_names)
        assert agent.catalog.for_context(owner_ctx(deps)).names != []
        # Named anyway, a tool the run was not offered is refused without calling the server.
        outcome = await agent.catalog.for_context(contact_ctx(deps)).call(
            "files__record", {"note": "contact"}, contact_ctx(deps)
        )
        assert "unknown tool" in outcome["error"]


async def test_a_crash_between_the_call_and_the_answer_does_not_call_twice(
    servers: McpServers,
    db: AsyncDatabase[dict[str, Any]],
    http: aiohttp.ClientSession,
    effects: Path,
) -> None:
    class Crash(BaseException):
        """The process dying: nothing in the app catches it."""

    note = "crash-test-note"
    call = ScriptedModel(lambda r: "").call("files__record", note=note)
    deps = make_deps(db, http, servers, budget=100_000)
    ctx = owner_ctx(deps, inbox_id="inbox-1", run_id="inbox-1")

    def crash_after_the_call(request: Request) -> ModelMessage:
        if results(request):  # the call is done and recorded: the process dies here
            raise Crash
        return call

    first = ScriptedModel(crash_after_the_call)
    with pytest.raises(Crash):
        await Agent(first, core_catalog()).respond("note it", ctx)
    assert _lines(effects, note) == 1
    again = ScriptedModel(sequence(call, "noted"))
    reply = await Agent(again, core_catalog()).respond("note it", owner_ctx(
        deps, inbox_id="inbox-1", run_id="inbox-1", replay=True
    ))  # fmt: skip
    assert reply.text == "noted"
    assert _lines(effects, note) == 1
    assert "recorded" in last_result(again)["result"]  # the first call's own result


def _lines(path: Path, note: str) -> int:
    return path.read_text(encoding="utf-8").splitlines().count(note) if path.exists() else 0


async def test_a_server_that_dies_mid_call_is_an_error_not_a_crash(
    db: AsyncDatabase[dict[str, Any]],
    http: aiohttp.ClientSession,
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(model.call("doomed__die"), "it died")
    async with running(stdio_server("doomed"), call_timeout=10) as manager:
        deps = make_deps(db, http, manager, budget=100_000)
        reply = await Agent(model, core_catalog()).respond("die", owner_ctx(deps))
        died = last_result(model)  # ours, plain: not marked as the server's words
        assert died == {"error": "MCP server 'doomed' stopped during the call to 'die'"}
        assert reply.text == "it died"
        async with asyncio.timeout(30):  # restarted with backoff; its tools come back
            while manager.connected() != ["doomed"]:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.1)
        model.responder = lambda r: "later"
        await Agent(model, core_catalog()).respond("again", owner_ctx(deps))
        assert "doomed__echo" in model.requests[-1].tool_names
