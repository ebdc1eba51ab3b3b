"""``doctor``'s MCP lines: the file checked server by server, each command looked up,
each server started, listed and stopped; every problem fails the report, names its
server and says what to fix."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cli.doctor import Check, check_mcp, doctor
from tests.conftest import make_settings
from tests.fakes.mcp_kit import http_server, our_server_processes, stdio_server
from tests.fakes.openai_api import FakeOpenAI

UNSET = f"WK_TEST_UNSET_{uuid.uuid4().hex[:8].upper()}"


async def test_each_server_is_tried_within_the_start_timeout(tmp_path: Path) -> None:
    local = stdio_server("local")
    async with http_server("web", extra=2) as web:
        config = tmp_path / "servers.json"
        config.write_text(
            json.dumps(
                {
                    "mcpServers": {
                        "local": {"command": local.command, "args": list(local.args)},
                        "web": {"url": web.url},
                        "mail": {"command": "/nonexistent/imap-mcp"},
                    }
                }
            )
        )
        settings = make_settings(
            data_dir=tmp_path / "data", mcp_config=config, mcp_start_timeout_seconds=20
        )
        async with asyncio.timeout(60):  # a watchdog: each start is bounded by 20 s
            checks = await check_mcp(settings)
    assert checks[0] == Check("mcp", True, f"3 server(s) in {config}")
    found = {c.name: c for c in checks[1:]}
    assert (found["mcp local"].ok, found["mcp local"].detail) == (True, "stdio: connected, 6 tools")
    assert (found["mcp web"].ok, found["mcp web"].detail) == (True, "http: connected, 8 tools")
    assert found["mcp mail"] == Check(
        "mcp mail",
        False,
        "stdio: command not found: /nonexistent/imap-mcp",
        fatal=True,
        step='install /nonexistent/imap-mcp, or put its full path in the "command" of MCP '
        f"server mail in {config}",
    )
    assert our_server_processes() == []


async def test_file_problems_and_no_file(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path)
    assert await check_mcp(settings) == [
        Check("mcp", False, "no servers (MCP_CONFIG unset and no DATA_DIR/mcp.json)")
    ]
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"a": {"url": "ftp://x"}}}')
    summary, server = await check_mcp(settings)
    assert (summary.name, summary.ok, summary.fatal) == ("mcp", False, True)
    assert "while 1 of them is wrong, none starts" in summary.detail
    assert server == Check(
        "mcp a",
        False,
        "url must start with http:// or https://",
        fatal=True,
        step=f"fix MCP server a in {tmp_path / 'mcp.json'}: url must start with http:// or https://",
    )


@pytest.fixture
async def model_api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as api:
        yield api


def broken_files(good: dict[str, object]) -> list[tuple[str, str, list[str], list[str]]]:
    """(case, file text, report lines, next: lines) for each way the file goes wrong."""
    both = {
        "mcpServers": {
            "notes": good,
            "mail": {"command": "imap-mcp", "env": {"PASS": f"${{{UNSET}}}"}},
        }
    }
    return [
        (
            "not json",
            '{"mcpServers": {"mail": {"command": "imap-mcp",}}}',
            ["[FAIL] mcp: {path}: not valid JSON (line 1, column 48: Expecting property name"],
            ["next: fix the MCP servers file: {path}: not valid JSON (line 1, column 48"],
        ),
        (
            "unset variable",
            json.dumps(both),
            [
                "[FAIL] mcp: 2 server(s) in {path}; while 1 of them is wrong, none starts",
                f"[FAIL] mcp mail: env.PASS uses ${{{UNSET}}}, which is not set in the environment",
                "[ok  ] mcp notes: stdio: connected, 6 tools",
            ],
            [f"next: set {UNSET} (in the environment or .env): MCP server mail uses ${{{UNSET}}}"],
        ),
        (
            "missing command",
            json.dumps({"mcpServers": {"notes": good, "mail": {"command": "imap-mcp-not-here"}}}),
            [
                "[ok  ] mcp: 2 server(s) in {path}",
                "[FAIL] mcp mail: stdio: command not found: imap-mcp-not-here",
                "[ok  ] mcp notes: stdio: connected, 6 tools",
            ],
            [
                'next: install imap-mcp-not-here, or put its full path in the "command" of '
                "MCP server mail in {path}"
            ],
        ),
    ]


GOOD = stdio_server("notes")
CASES = broken_files({"command": GOOD.command, "args": list(GOOD.args)})


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("text", "lines", "steps"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_doctor_fails_on_a_broken_mcp_setup_and_says_what_to_fix(
    model_api: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    lines: list[str],
    steps: list[str],
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(text)
    settings = make_settings(
        data_dir=tmp_path / "data",
        openai_api_key="sk-test",
        openai_base_url=model_api.base_url,
        mcp_config=path,
    )
    code = await doctor(settings)
    out = capsys.readouterr().out
    assert code == 1, out
    report = out.splitlines()
    for line in [*lines, *steps]:
        want = line.replace("{path}", str(path))
        assert any(got.startswith(want) for got in report), f"{want!r} not in:\n{out}"
    assert "[ok  ] model: openai: reachable" in out  # the rest of the report is there
    assert "nothing missing" not in out
    assert our_server_processes() == []
