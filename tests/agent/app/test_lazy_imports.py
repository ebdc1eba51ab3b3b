"""``watchkeeper run`` imports a provider's or a channel's SDK only when it is configured.

Each case runs in a fresh interpreter: this test process has imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SDKS = ("google.genai", "twilio", "neonize", "openai", "telegram")
ON_USE = (
    "gridfs", "jinja2", "aiohttp_jinja2", "croniter", "dateutil", "xml.sax",
    "storage.sandbox.execute", "agent.tools.mcp.client", "agent.tools.mcp.tools",
)  # fmt: skip
"""Loaded on first use: GridFS for the first photo or voice note, jinja2 for the first
dashboard page, croniter (and its dateutil) for the first cron expression checked or
walked, xml.sax for the first phone call, the sandbox's checks and execution for the
first ``db_query``, the MCP client and its tools for the first server configured.
Most processes see none of them."""
CHILD_ONLY = ("storage.embedded.server",)
"""The entry point of the embedded database's own process, never loaded by the agent."""
DATABASE = ("secantus", "ctypes")
"""The embedded database's modules: in the agent's process, where it runs by default;
in the child's with ``EMBEDDED_DB_SEPARATE_PROCESS``."""
# The path `watchkeeper run` takes, up to a running app (Telegram is unreachable here:
# the channel keeps retrying in the background, which is enough).
RUN_APP = """
import asyncio, json, sys
from agent.cli.main import main  # noqa: F401  (what `python -m agent run` imports)
from agent.config import load_settings
from agent.app.core import build_app
from agent.app.http import make_web_app
from agent.llm.factory import build_model

async def run():
    settings = load_settings()
    async with build_app(settings, model=build_model(settings)) as app:
        make_web_app(app)
        assert "telegram" in app.channels

asyncio.run(run())
print(json.dumps([m for m in sys.argv[1:] if m in sys.modules]))
"""
BUILD_MODEL = """
import json, sys
from agent.config import load_settings
from agent.llm.factory import build_model
build_model(load_settings())
print(json.dumps([m for m in sys.argv[1:] if m in sys.modules]))
"""
CHECK_ONLY = """
import json, sys
from agent.config import ConfigError, load_settings
from agent.llm.factory import check_model
try:
    check_model(load_settings())
except ConfigError as exc:
    print(json.dumps([str(exc), [m for m in sys.argv[1:] if m in sys.modules]]))
"""
DOCTOR_MODEL = """
import asyncio, json
from agent.cli.doctor import check_model
from agent.config import load_settings
[check] = asyncio.run(check_model(load_settings()))
print(json.dumps([check.ok, check.detail, check.step]))
"""


def _run(script: str, tmp_path: Path, modules: tuple[str, ...] = SDKS, **env: str) -> object:
    clean = {k: v for k, v in os.environ.items() if not k.isupper() or k in ("PATH", "HOME")}
    clean.update({"PYTHONPATH": str(ROOT), "DATA_DIR": str(tmp_path / "data"), **env})
    done = subprocess.run(
        [sys.executable, "-c", script, *modules],
        cwd=tmp_path,  # no .env here
        env=clean,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("separate", "database_here"),
    [("false", list(DATABASE)), ("true", [])],
    ids=["database-in-the-agent", "database-in-a-process-of-its-own"],
)
def test_telegram_and_openai_load_no_other_sdk_nor_what_waits_for_first_use(
    tmp_path: Path, separate: str, database_here: list[str]
) -> None:
    loaded = _run(
        RUN_APP,
        tmp_path,
        (*SDKS, *ON_USE, *CHILD_ONLY, *DATABASE),
        EMBEDDED_DB_SEPARATE_PROCESS=separate,
        TELEGRAM_BOT_TOKEN="123456789:AAFakeTokenForTests-xyz",
        TELEGRAM_API_BASE_URL="http://127.0.0.1:9",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OWNER_TELEGRAM_IDS="42",
        HTTP_PORT="0",
    )
    # OpenAI's SDK loads with the first exchange (``agent.llm.lazy_sdk``): an app that
    # got no message never needed it. No photo came, no page was asked for, no job exists,
    # no call was placed. The database's modules are here only when it runs here.
    assert loaded == ["telegram", *database_here]


def test_gemini_configured_loads_google_genai(tmp_path: Path) -> None:
    loaded = _run(BUILD_MODEL, tmp_path, GEMINI_API_KEY="g-test")
    assert loaded == ["google.genai"]


def test_a_missing_key_is_found_without_importing_an_sdk(tmp_path: Path) -> None:
    found = _run(CHECK_ONLY, tmp_path, LLM_PROVIDER="gemini", OPENAI_API_KEY="sk")
    assert isinstance(found, list)
    assert "GEMINI_API_KEY is not set" in found[0]
    assert found[1] == []


def test_gemini_without_its_sdk_says_which_extra_to_install(tmp_path: Path) -> None:
    """Google's SDK is an extra (``gemini``): an install without it, asked for Gemini,
    says how to add it, from ``watchkeeper run``'s first check, without an import."""
    shadow = tmp_path / "shadow"  # a ``google`` package without ``genai``, found first
    (shadow / "google").mkdir(parents=True)
    (shadow / "google" / "__init__.py").write_text("")
    without = os.pathsep.join([str(shadow), str(ROOT)])
    found = _run(CHECK_ONLY, tmp_path, GEMINI_API_KEY="g-test", PYTHONPATH=without)
    assert isinstance(found, list)
    install = f"{sys.executable} -m pip install -e '{ROOT}[gemini]'"  # from the checkout
    assert install in found[0] and "watchkeeper[" not in found[0]  # it is not on PyPI
    assert found[1] == []
    ok, detail, step = _run(DOCTOR_MODEL, tmp_path, GEMINI_API_KEY="g-test", PYTHONPATH=without)
    assert not ok and detail.startswith("gemini: provider gemini needs Google's SDK")
    assert step == f"install Gemini's SDK: {install}, then start again"


MCP_WITHOUT_SDK = """
import asyncio, json
from agent.app.features.mcp import build_servers
from agent.cli.doctor import check_mcp
from agent.config import load_settings
from agent.tools.mcp.config import McpConfigError
settings = load_settings()
try:
    build_servers(settings)
    said = None
except McpConfigError as exc:
    said = str(exc)
[check] = asyncio.run(check_mcp(settings))
print(json.dumps([said, check.ok, check.step]))
"""


def test_an_mcp_file_without_the_sdk_says_which_extra_to_install(tmp_path: Path) -> None:
    """The MCP SDK is an extra (``mcp``). Run by an interpreter whose site-packages
    lack it: the servers file is reported (as a bad file is: no MCP tools, start-up goes
    on), and ``doctor`` names the install as the next step."""
    site = tmp_path / "site"  # this interpreter's packages, as links, but for mcp's
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name != "mcp" and not entry.name.startswith("mcp-"):
            (site / entry.name).symlink_to(entry)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mcp.json").write_text('{"mcpServers": {"x": {"command": "true"}}}')
    clean = {k: v for k, v in os.environ.items() if not k.isupper() or k in ("PATH", "HOME")}
    clean.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), DATA_DIR="data")
    done = subprocess.run(
        [sys.executable, "-S", "-c", MCP_WITHOUT_SDK],  # -S: not the real site-packages
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said, ok, step = json.loads(done.stdout.strip().splitlines()[-1])
    install = f"{sys.executable} -m pip install -e '{ROOT}[mcp]'"  # from the checkout
    assert f"the MCP SDK is not installed: {install} (scripts/run" in said
    assert not ok and step.startswith(f"install the MCP SDK: {install},")
