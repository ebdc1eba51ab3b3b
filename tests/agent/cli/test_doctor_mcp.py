"""``doctor``'s MCP lines: the file checked, each server started, listed and stopped."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent.cli.doctor_mcp import check_mcp
from tests.agent.tools.test_mcp_client import our_server_processes
from tests.conftest import make_settings
from tests.fakes.mcp_kit import http_server, stdio_server


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
        began = time.monotonic()
        checks = await check_mcp(settings)
        assert time.monotonic() - began < 25
    assert checks[0] == ("mcp", True, f"3 server(s) in {config}")
    found = {name: (ok, detail) for name, ok, detail in checks[1:]}
    assert found["mcp local"] == (True, "stdio: connected, 6 tools")
    assert found["mcp web"] == (True, "http: connected, 8 tools")
    assert found["mcp mail"][0] is False
    assert "command not found" in found["mcp mail"][1]
    assert our_server_processes() == []


async def test_file_problems_and_no_file(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path)
    assert await check_mcp(settings) == [
        ("mcp", False, "no servers (MCP_CONFIG unset and no DATA_DIR/mcp.json)")
    ]
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"a": {"url": "ftp://x"}}}')
    [(name, ok, detail)] = await check_mcp(settings)
    assert (name, ok) == ("mcp", False)
    assert detail == f"{tmp_path / 'mcp.json'}: server 'a': url must start with http:// or https://"
