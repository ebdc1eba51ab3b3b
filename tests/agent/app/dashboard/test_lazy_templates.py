"""jinja2 loads on the dashboard's first page, not when ``watchkeeper run`` starts: most
owners never open the dashboard, and jinja2 costs about 2 MiB resident and tens of ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from agent.app.dashboard import context
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness

ROOT = Path(__file__).resolve().parents[4]
TEMPLATE_MODULES = ("jinja2", "aiohttp_jinja2")
# What `watchkeeper run` does up to a serving app, less the serving (no page is asked for).
BUILD_WEB_APP = """
import asyncio, json, sys
import agent.app.http
from agent.config import load_settings
from agent.app.core import build_app
from agent.app.http import make_web_app
from agent.llm.factory import build_model

async def run():
    settings = load_settings()
    async with build_app(settings, model=build_model(settings)) as app:
        make_web_app(app)

asyncio.run(run())
print(json.dumps([m for m in sys.argv[1:] if m in sys.modules]))
"""


def test_building_the_web_app_does_not_import_jinja2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.isupper() or k in ("PATH", "HOME")}
    env.update(
        PYTHONPATH=str(ROOT),
        DATA_DIR=str(tmp_path / "data"),
        TELEGRAM_BOT_TOKEN="123456789:AAFakeTokenForTests-xyz",
        TELEGRAM_API_BASE_URL="http://127.0.0.1:9",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OWNER_TELEGRAM_IDS="42",
        HTTP_PORT="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", BUILD_WEB_APP, *TEMPLATE_MODULES],
        cwd=tmp_path,  # no .env here
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


async def test_pages_share_one_environment_and_answer_html(
    dash: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[jinja2.Environment] = []
    build = context.template_env

    def counted() -> jinja2.Environment:
        built.append(build())
        return built[-1]

    monkeypatch.setattr(context, "template_env", counted)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/login", "/", "/alerts"):
        resp = await dash.client.get(path, headers=bearer)
        assert resp.status == 200, path
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
    assert len(built) == 1
