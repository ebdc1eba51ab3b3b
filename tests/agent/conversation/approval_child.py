"""A whole app that handles one "approve CODE" from the owner, run as its own process
so a test can kill it (``SIGKILL``, its MCP server with it) in the middle of the call
the approval makes: ``python -m tests.agent.conversation.approval_child URI DB CODE``.

It uses the test's SecantusDB server and database, the ``shop`` MCP server over stdio,
and the alert app's fake clock (``tests.fakes.alert_app.START``), and never exits on
its own while the call runs.
"""

from __future__ import annotations

import asyncio
import sys

from agent.tools.mcp.client import McpServers
from tests.databases import attach
from tests.fakes.alert_app import alert_app
from tests.fakes.features import providing
from tests.fakes.mcp_kit import stdio_server

APPROVAL_ID = "approve-1"
"""The transport's id of the approval: the restarted app finds it unfinished."""


async def main(uri: str, db_name: str, code: str) -> None:
    manager = McpServers([stdio_server("shop")], start_timeout=20, call_timeout=60)
    await manager.start()
    await manager.until_settled()
    try:
        async with (
            attach(uri) as database,
            alert_app(database, db_name=db_name, features=(providing(mcp=manager),)) as h,
        ):
            await h.chat.say(f"approve {code}", external_id=APPROVAL_ID)
            await h.settle()
    finally:
        await manager.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
