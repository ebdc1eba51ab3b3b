"""Issue 36, point 6: an approved call finishes once or says it did not.

A process killed (``SIGKILL``, its MCP server with it) in the middle of an approved
6-second MCP call (``approval_child``, a whole app in its own process): the app started
again on the same database handles the approval anew and tells the owner the call was
interrupted, never that it was done; the owner's second "approve" makes it. The real
OpenAI SDK against the fake OpenAI server holds the call after a hostile MCP result
(``test_untrusted_holds``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent.llm.openai.model import OpenAIModel
from agent.tools.mcp.client import McpServers
from tests.agent.conversation.test_untrusted_holds import ECHO, last_result, say, shop
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_TG, START, Harness, alert_app
from tests.fakes.clock import FakeClock
from tests.fakes.features import providing
from tests.fakes.openai_api import FakeOpenAI
from tests.waiting import until_async

__all__ = ["shop"]  # a fixture, imported for pytest

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[3]


async def owner_says(h: Harness, text: str, external_id: str) -> str:
    """``say`` with the transport's id given: this app's channel counts from ``u1``
    again, and the earlier app's messages are in the same database."""
    assert await h.chat.say(text, external_id=external_id)
    await h.settle()
    return h.chat.texts(str(OWNER_TG))[-1]


@asynccontextmanager
async def shop_app(
    app_db: AppDb, db_name: str, shop: McpServers, fake: FakeOpenAI, **options: Any
) -> AsyncIterator[Harness]:
    model = OpenAIModel("sk-test", "gpt-fake", base_url=fake.base_url)
    try:
        async with alert_app(
            app_db,
            db_name=db_name,
            model=model,  # type: ignore[arg-type]
            features=(providing(mcp=shop),),
            **options,
        ) as h:
            yield h
    finally:
        await model.aclose()


async def test_a_kill_during_an_approved_call_is_reported_interrupted_and_approvable(
    app_db: AppDb,
    mongo_client: AsyncMongoClient[dict[str, Any]],
    shop: McpServers,
    tmp_path: Path,
) -> None:
    db_name = f"approvals_{uuid.uuid4().hex[:10]}"
    held = mongo_client[db_name]["settings"]
    slow = ("shop__slow", {"seconds": 6})  # an MCP call that takes its time
    async with FakeOpenAI() as fake:
        async with shop_app(app_db, db_name, shop, fake) as h:
            fake.reply_tool_calls(ECHO)
            fake.reply_tool_calls(slow)
            fake.reply_text("Held.")
            await say(h, "check my order")
            code = last_result(fake)["code"]

        # Another process approves it and is killed, with its MCP server, mid-call.
        log = tmp_path / "child.log"
        with log.open("w") as output:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.agent.conversation.approval_child",
                app_db.uri, db_name, code,
                cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:

                async def started() -> bool:
                    doc = await held.find_one({"_id": f"held_send:{code}"})
                    assert child.returncode is None, log.read_text()
                    taken = (doc or {}).get("started") or (doc or {}).get("claimed") or {}
                    return "0" in taken  # marked as being made (older code: "claimed")

                await until_async(started, "the approved call started", within=60)
            finally:
                os.killpg(child.pid, signal.SIGKILL)
                await child.wait()
        doc = await held.find_one({"_id": f"held_send:{code}"})
        assert doc is not None and "0" not in (doc.get("finished") or {}), "killed too late"

        # A fresh app on the same database, after the dead process's claim went stale:
        # the approval is handled again, and the owner hears the call was interrupted.
        later = FakeClock(START + timedelta(minutes=20))
        async with shop_app(app_db, db_name, shop, fake, clock=later) as h:
            try:
                await h.settle()
                [said] = h.chat.texts(str(OWNER_TG))
                assert said.startswith("• shop__slow: interrupted: Watchkeeper stopped"), said
                assert "done" not in said.replace("what was not done", ""), said
                assert f"Reply 'approve {code}' to do what was not done" in said

                reply = await owner_says(h, f"approve {code}", "approve-2")  # a new word
                assert reply.startswith("• shop__slow: done") and "slept 6" in reply, reply
                again = await owner_says(h, f"approve {code}", "approve-3")
                assert again.startswith("Nothing is waiting"), again
                assert len(fake.bodies) == 3  # approvals never reach the model
            finally:
                await mongo_client.drop_database(db_name)
