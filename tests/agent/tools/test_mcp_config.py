"""The MCP servers file: the common ``mcpServers`` format, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.tools.mcp.config import (
    HttpServer,
    McpConfigError,
    StdioServer,
    load_mcp_config,
    parse_mcp_config,
)
from tests.conftest import make_settings


def parse(doc: object, environ: dict[str, str] | None = None) -> list[object]:
    return list(parse_mcp_config(json.dumps(doc), "mcp.json", environ or {}))


def test_stdio_and_http_servers_read_with_variables_from_the_environment() -> None:
    servers = parse(
        {
            "mcpServers": {
                "mail": {
                    "command": "uvx",
                    "args": ["imap-mcp", "--user", "${IMAP_USER}"],
                    "env": {"IMAP_PASSWORD": "${IMAP_PASSWORD}"},
                },
                "notes-api": {
                    "url": "https://notes.example.com/mcp",
                    "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                },
                "off": {"command": "x", "disabled": True},
            }
        },
        {"IMAP_USER": "me@example.com", "IMAP_PASSWORD": "pw", "NOTES_TOKEN": "tok"},
    )
    assert servers == [
        StdioServer(
            "mail", "uvx", ("imap-mcp", "--user", "me@example.com"), {"IMAP_PASSWORD": "pw"}
        ),
        HttpServer("notes-api", "https://notes.example.com/mcp", {"Authorization": "Bearer tok"}),
    ]


def test_a_server_may_be_trusted_for_reads() -> None:
    """``"trust": "read"``: its read-only tools stay callable after outside text; a
    server without it is not trusted (every call waits for the owner then)."""
    mail, notes, plain = parse(
        {
            "mcpServers": {
                "mail": {"command": "uvx", "args": ["imap-mcp"], "trust": "read"},
                "notes": {"url": "https://notes.example.com/mcp", "trust": "read"},
                "shop": {"command": "shop-mcp"},
            }
        }
    )
    assert isinstance(mail, StdioServer) and mail.trust_read
    assert isinstance(notes, HttpServer) and notes.trust_read
    assert isinstance(plain, StdioServer) and not plain.trust_read


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"servers": {}}, '"mcpServers"'),
        ({"mcpServers": {"my.server": {"command": "x"}}}, "server 'my.server': the name"),
        ({"mcpServers": {"a__b": {"command": "x"}}}, "without '__'"),
        ({"mcpServers": {"both": {"command": "x", "url": "http://h/mcp"}}}, "exactly one"),
        ({"mcpServers": {"none": {"args": []}}}, "exactly one"),
        ({"mcpServers": {"s": {"command": "x", "args": "--flag"}}}, "args must be a list"),
        ({"mcpServers": {"s": {"command": "x", "args": [["nested"]]}}}, "args[0] must be"),
        ({"mcpServers": {"s": {"command": "x", "env": ["A=1"]}}}, "env must be an object"),
        ({"mcpServers": {"s": {"command": "x", "headers": {}}}}, '"headers" does not go'),
        ({"mcpServers": {"s": {"url": "ftp://h/mcp"}}}, "url must start with http"),
        ({"mcpServers": {"s": {"url": "http://h/mcp", "type": "sse"}}}, "SSE"),
        ({"mcpServers": {"s": {"command": "x", "env": {"K": "${NOPE}"}}}}, "${NOPE}"),
        ({"mcpServers": {"s": "npx server"}}, "must be an object"),
        ({"mcpServers": {"s": {"command": "x", "trust": "all"}}}, 'trust must be "read"'),
        ({"mcpServers": {"s": {"url": "http://h/mcp", "trust": True}}}, 'trust must be "read"'),
    ],
)
def test_a_bad_file_names_the_server_and_field(doc: object, says: str) -> None:
    with pytest.raises(McpConfigError) as err:
        parse(doc)
    assert says in str(err.value)
    assert str(err.value).startswith("mcp.json:")


def test_not_json_says_where() -> None:
    with pytest.raises(McpConfigError, match=r"not valid JSON \(line 2"):
        parse_mcp_config('{"mcpServers": {\n,}', "mcp.json", {})


def test_default_path_is_data_dir_mcp_json_when_present(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path)
    assert load_mcp_config(settings, {}) == []
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"a": {"command": "srv"}}}')
    assert load_mcp_config(settings, {}) == [StdioServer("a", "srv")]


def test_a_missing_mcp_config_file_is_an_error(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path, mcp_config=tmp_path / "nope.json")
    with pytest.raises(McpConfigError, match="does not exist"):
        load_mcp_config(settings, {})


def test_variables_come_from_dotenv_with_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("IMAP_PASSWORD=from-dotenv\nIMAP_USER=dotenv-user\n")
    monkeypatch.setenv("IMAP_USER", "env-user")
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "mail": {
                        "command": "imap-mcp",
                        "env": {"U": "${IMAP_USER}", "P": "${IMAP_PASSWORD}"},
                    }
                }
            }
        )
    )
    [server] = load_mcp_config(make_settings(data_dir=tmp_path))
    assert isinstance(server, StdioServer)
    assert server.env == {"U": "env-user", "P": "from-dotenv"}
