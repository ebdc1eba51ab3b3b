"""Cron jobs and pulses get the MCP tools (a real server over stdio), and the pulse
brief says which servers are connected."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.tools.mcp.client import McpServers
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.features import providing
from tests.fakes.mcp_kit import stdio_server
from tests.fakes.scripted import Request, ScriptedModel
from tests.scheduling_kit import parts_of, scheduled_app, tool_call, tool_results

pytestmark = pytest.mark.timeout(90)
NOW = datetime(2026, 3, 6, 17, 0, tzinfo=UTC)


async def test_cron_and_pulse_runs_use_mcp_tools(app_db: AppDb, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"

    def respond(request: Request) -> object:
        if tool_results_in(request):
            return "done"
        return tool_call("files__record", note=f"from {request.messages[-1].text[:5]!r}")

    model = ScriptedModel(respond)  # type: ignore[arg-type]
    manager = McpServers([stdio_server("files", effects=effects)], start_timeout=20)
    await manager.start()
    try:
        async with scheduled_app(
            app_db,
            tmp_path,
            model,
            FakeClock(NOW),
            pulse=True,
            before=[providing(mcp=manager)],
        ) as app:
            parts = parts_of(app)
            job = await parts.jobs.create(
                name="Notes", instruction="record a note", cron_expression="0 * * * *"
            )
            await parts.engine.recorder.cron(job, NOW)
            cron = model.requests[0]
            assert "files__record" in cron.tool_names
            assert "recorded (1 in all)" in tool_results(model)[-1]["result"]
            run = await parts.engine.run_pulse_now("manual")
            assert run.status == "success", run
            pulse = model.requests[-2]
            assert "files__record" in pulse.tool_names
            brief = pulse.messages[-1].text
            assert "MCP servers connected (their tools are offered): files." in brief
    finally:
        await manager.stop()
    assert len(effects.read_text(encoding="utf-8").splitlines()) == 2


async def test_a_pulse_without_mcp_servers_does_not_mention_them(
    app_db: AppDb, tmp_path: Path
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, FakeClock(NOW), pulse=True) as app:
        await parts_of(app).engine.run_pulse_now("manual")
    assert "MCP" not in model.requests[-1].messages[-1].text


def tool_results_in(request: Request) -> bool:
    return any(m.role == "tool" for m in request.messages)
