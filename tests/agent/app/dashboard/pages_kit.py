"""Shared pieces for the Runs, Jobs and Spend page tests: an app with the scheduler and
an admin token, an HTTP client on its real web app, runs recorded through ``RunStore``."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from agent.app.application import App
from agent.app.http import make_web_app
from storage.repos.runs.record import Outcome, Run, RunKind, Status
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import parts_of, scheduled_app

ADMIN = "dash-admin-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
NOW = datetime(2026, 11, 26, 15, 0, tzinfo=BERLIN)
"""A Thursday afternoon in the owner's timezone."""


@contextlib.asynccontextmanager
async def dash_app(
    app_db: AppDb, tmp_path: Path, clock: FakeClock, model: ScriptedModel | None = None
) -> AsyncIterator[App]:
    scripted = model or ScriptedModel(lambda r: "done")
    async with scheduled_app(
        app_db, tmp_path, scripted, clock, admin_token=ADMIN, timezone="Europe/Berlin"
    ) as app:
        yield app


@contextlib.asynccontextmanager
async def client_of(app: App) -> AsyncIterator[TestClient[Any, Any]]:
    client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def page(client: TestClient[Any, Any], path: str) -> str:
    resp = await client.get(path, headers=AUTH, allow_redirects=False)
    assert resp.status == 200, (path, resp.status, await resp.text())
    return await resp.text()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


async def record_run(
    app: App,
    kind: RunKind,
    status: Status,
    started: datetime,
    *,
    name: str | None = None,
    seconds: float = 2.0,
    **outcome: Any,
) -> str:
    """A run opened and closed through the real ``RunStore``, at ``started``."""
    runs = parts_of(app).runs
    job_id = "job1" if kind == "cron" else None
    if status == "skipped":
        skipped = await runs.skipped(kind, job_id, started, started, "nothing new", why="idle")
        return str(skipped.id)
    run = Run.first_try(kind, job_id, started, started, name=name)
    await runs.open(run)
    await runs.finish(run, Outcome(status, **outcome), started + timedelta(seconds=seconds))
    return str(run.id)
