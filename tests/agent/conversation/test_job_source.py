"""Issue 36, point 5: a job written from approved outside text keeps its source, and
its runs count as having read outside text, so their acting calls are held.

The owner approves a ``manage_cronjob`` create that a run held after a hostile MCP
result (``test_untrusted_holds``); the job then fires, its model asks to change the
owner's settings, and that call waits for the owner. Once the owner rewrites the
instruction in their own words, the source is gone.
"""

from __future__ import annotations

import pytest

from agent.tools.mcp.client import McpServers
from storage.repos.provenance import Provenance
from tests.agent.conversation.test_untrusted_holds import (
    CASES,
    ECHO,
    app,
    asks,
    last_result,
    say,
    shop,
)
from tests.databases import AppDb
from tests.scheduling_kit import parts_of

__all__ = ["shop"]  # a fixture, imported for pytest

pytestmark = pytest.mark.timeout(120)


async def test_a_job_written_from_approved_outside_text_has_its_acting_calls_held(
    app_db: AppDb, shop: McpServers
) -> None:
    async with app(app_db, shop) as (h, fake):
        parts = parts_of(h.app)
        await parts.pulse.update_config(enabled=False)
        cron, quiet = CASES["cron"], CASES["quiet_hours"]
        fake.reply_tool_calls(ECHO)
        fake.reply_tool_calls((cron.tool, cron.arguments))
        fake.reply_text("Held.")
        await say(h, "check my order")
        code = last_result(fake)["code"]
        assert (await say(h, f"approve {code}")).startswith("• manage_cronjob: done")
        [job] = await parts.jobs.list_jobs()
        source = {"untrusted": ["the result of the MCP tool shop/echo"], "approved": code}
        assert job.source == Provenance(("the result of the MCP tool shop/echo",), code)
        fake.reply_tool_calls(("manage_cronjob", {"action": "list"}))
        fake.reply_text("One job.")
        await say(h, "which jobs do I have?")
        [listed] = last_result(fake)["jobs"]
        assert listed["source"] == source  # the model and the owner see where it came from

        # The job runs: it read nothing outside in this run, yet its instruction did.
        fake.reply_tool_calls((quiet.tool, quiet.arguments))
        fake.reply_text("Done as the shop said.")
        await parts.engine.recorder.cron(job, h.clock())
        await h.settle()
        told = last_result(fake)
        assert told["needs_owner_confirmation"] is True, told
        assert "a job instruction written after reading the result of the MCP tool" in told["note"]
        assert not await quiet.done(h)
        ask = asks(h)[-1]
        assert ask.startswith("✋ In the job “shop orders” I read a job instruction written"), ask

        # The owner rewriting the instruction makes it theirs: its runs act at once.
        new = {"action": "update", "job_id": job.id, "instruction": "check order 1182"}
        fake.reply_tool_calls(("manage_cronjob", new))
        fake.reply_text("Changed.")
        await say(h, "make the shop job just check order 1182")
        [job] = await parts.jobs.list_jobs()
        assert job.source is None and job.instruction == "check order 1182"
