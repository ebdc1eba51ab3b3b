"""MCP servers start with the app in the background, show in ``/status`` and
``/api/status``, and stop with it; a bad file or server never blocks start-up. A turn
that starts while they connect (the first message, a message replayed after a restart)
waits for them, at most the start timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from agent.app.features.mcp import mcp_feature
from agent.app.status import status_data, status_text
from agent.llm.openai.model import OpenAIModel
from agent.tools.mcp.config import StdioServer
from tests.agent.llm.llm_kit import OPENAI_KEY
from tests.databases import AppDb
from tests.fakes.chat_app import ChatApp, chat_app
from tests.fakes.mcp_kit import Gate, our_server_processes, stdio_server
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted import ScriptedModel
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]


def write_config(path: Path, *servers: StdioServer) -> Path:
    doc = {
        "mcpServers": {
            s.name: {"command": s.command, "args": list(s.args), "env": dict(s.env)}
            for s in servers
        }
    }
    path.write_text(json.dumps(doc))
    return path


async def test_servers_start_in_the_background_and_stop_with_the_app(
    app_db: AppDb, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    model = ScriptedModel(lambda r: "ok")
    async with Gate() as gate:
        write_config(
            data / "mcp.json",  # the default place
            stdio_server("local", gate=gate),  # held until the app has started
            StdioServer("broken", "/nonexistent/imap-mcp"),
        )
        async with chat_app(
            app_db, f"t_{uuid.uuid4().hex[:8]}", model, data, features=[mcp_feature]
        ) as chat:
            servers = chat.app.deps.mcp
            assert servers is not None
            # Started with the server held at its gate: start-up did not wait for it
            # (nor out its start timeout: it would have failed then).
            assert [s.state for s in servers.status() if s.name == "local"] == ["starting"]
            gate.open()
            await until(lambda: "local" in servers.connected(), "local connected")
            data_now = await status_data(chat.app)  # what GET /api/status answers
            by_name = {s["name"]: s for s in data_now["mcp"]["servers"]}
            assert by_name["local"] == {
                "name": "local",
                "transport": "stdio",
                "state": "connected",
                "tools": 6,
                "error": None,
            }
            assert by_name["broken"]["state"] == "failed"
            assert "command not found" in by_name["broken"]["error"]
            text = status_text(data_now, "m", tz=ZoneInfo("UTC"), now=datetime.now(UTC))
            assert "MCP: local connected (6 tools), broken failed (command not found" in text
            assert [r for r in await chat.ask("/status") if "MCP: local connected" in r]
            assert our_server_processes()
    assert our_server_processes() == []


async def test_a_bad_servers_file_is_reported_and_the_app_still_starts(
    app_db: AppDb, tmp_path: Path
) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"mail box": {"command": "x"}}}')
    model = ScriptedModel(lambda r: "ok")
    async with chat_app(
        app_db,
        f"t_{uuid.uuid4().hex[:8]}",
        model,
        tmp_path / "data",
        features=[mcp_feature],
        mcp_config=bad,
    ) as chat:
        assert chat.app.deps.mcp is None
        data_now = await status_data(chat.app)
        assert "server 'mail box': the name" in data_now["mcp"]["error"]
        assert "MCP: config error:" in status_text(
            data_now, "m", tz=ZoneInfo("UTC"), now=datetime.now(UTC)
        )
        assert await chat.ask("hi") == ["ok"]


def test_without_servers_the_sdk_is_not_imported(tmp_path: Path) -> None:
    script = (
        "import sys, agent.app.features, agent.cli.doctor, agent.tools.catalog;"
        "print('mcp' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "False", done.stderr


class Logged(logging.Handler):
    """Sets ``seen`` when the MCP client logs a line containing ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = asyncio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if self.text in line:
            self.seen.set()


@contextlib.contextmanager
def logged(text: str) -> Iterator[Logged]:
    logger = logging.getLogger("agent.tools.mcp.client")
    handler, level = Logged(text), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.asynccontextmanager
async def app_with(
    app_db: AppDb, db_name: str, data: Path, api: FakeOpenAI, *servers: StdioServer, **kw: float
) -> AsyncIterator[ChatApp]:
    """The app on the OpenAI adapter (pointed at ``api``) with ``servers`` in its file."""
    config = write_config(data.parent / f"{db_name}-mcp.json", *servers)
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=api.base_url)
    try:
        async with chat_app(
            app_db, db_name, model, data, features=[mcp_feature], mcp_config=config, **kw
        ) as chat:
            yield chat
    finally:
        await model.aclose()


def offered(api: FakeOpenAI, index: int) -> list[str]:
    return [t["function"]["name"] for t in api.bodies[index].get("tools", [])]


async def open_once_waiting(gate: Gate, chat: ChatApp, waiting: Logged) -> None:
    """Open ``gate`` once the turn waits for the server, or once it is answered
    without waiting (then the test's assertions say what went wrong)."""
    answered = asyncio.ensure_future(chat.app.pipeline.join())
    told = asyncio.ensure_future(waiting.seen.wait())
    await asyncio.wait([answered, told], return_when=asyncio.FIRST_COMPLETED)
    gate.open()
    await answered
    told.cancel()


SPECIAL = 'a < b && c > "d" — <b>bold</b> &amp; 5 > 3'


async def test_the_first_message_after_start_waits_for_a_slow_server_and_gets_its_tools(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with FakeOpenAI() as api, Gate() as gate:
        api.reply_tool_calls(("slow__echo", {"text": SPECIAL}))
        api.reply_text("done")
        with logged("waiting up to") as waiting:
            async with app_with(
                app_db,
                f"t_{uuid.uuid4().hex[:8]}",
                tmp_path / "data",
                api,
                stdio_server("slow", gate=gate),
                mcp_start_timeout_seconds=60,
            ) as chat:
                await chat.chat.say("echo it")  # right after start: the server is held
                await open_once_waiting(gate, chat, waiting)
                assert chat.chat.texts() == ["done"]
        assert "slow__echo" in offered(api, 0)
        [(_, result)] = api.tool_results(1)
        # As the server said it: no HTML entities, inside the untrusted block.
        assert result == {
            "result": '<external_content from="the result of the MCP tool slow/echo" '
            'trust="untrusted">\n'
            f"{SPECIAL}\n</external_content>"
        }


async def test_a_message_replayed_after_a_restart_gets_the_tools_of_a_slow_server(
    app_db: AppDb, tmp_path: Path
) -> None:
    db_name, data = f"t_{uuid.uuid4().hex[:8]}", tmp_path / "data"
    async with FakeOpenAI() as api, Gate() as gate:
        api.reply_text("first answer")
        async with app_with(app_db, db_name, data, api) as chat:
            assert await chat.ask("echo it") == ["first answer"]
            db = chat.app.deps.db
            # What a process killed before storing its answer leaves behind.
            stale = datetime.now(UTC) - timedelta(hours=1)
            await db["inbox"].update_many(
                {}, {"$set": {"status": "processing", "claimed_at": stale}}
            )
            await db["messages"].delete_many({})
            await db["outbox"].delete_many({})
        api.reply_text("answered with tools")
        with logged("waiting up to") as waiting:
            async with app_with(
                app_db,
                db_name,
                data,
                api,
                stdio_server("slow", gate=gate),
                mcp_start_timeout_seconds=60,
            ) as chat:
                await open_once_waiting(gate, chat, waiting)
                assert chat.chat.texts() == ["answered with tools"]
        assert "slow__echo" not in offered(api, 0)
        assert "slow__echo" in offered(api, 1), offered(api, 1)


async def test_a_server_that_never_starts_holds_the_turn_only_until_the_start_timeout(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with FakeOpenAI() as api, Gate() as gate:
        api.reply_text("answered without it")
        with logged("answering without MCP server(s) stuck") as skipped:
            async with app_with(
                app_db,
                f"t_{uuid.uuid4().hex[:8]}",
                tmp_path / "data",
                api,
                stdio_server("stuck", gate=gate),  # never opened
                mcp_start_timeout_seconds=2,
            ) as chat:
                assert await chat.ask("hello") == ["answered without it"]
                assert skipped.seen.is_set(), skipped.lines
        assert not any(name.startswith("stuck__") for name in offered(api, 0))
