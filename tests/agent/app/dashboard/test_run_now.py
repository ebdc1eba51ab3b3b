"""The Jobs page's "Run now" answers at once and starts one run at a time (issue 36):
the POST used to stay open for the whole run (five clicks, five runs queued, the last
answered after 25 s). Now the run goes on in the background, a click while it is under
way is refused, in this process or another one on the same database, and once it has
finished a click starts a new one.

The model is the real OpenAI SDK against the fake server, held at a gate the test opens."""

from __future__ import annotations

import asyncio
import contextlib
import html
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.llm.lazy_sdk import warm_model
from scheduler.engine import AlreadyRunning
from scheduler.fires.claims import run_now_key
from tests.agent.app.dashboard.pages_kit import (
    ADMIN,
    AUTH,
    NOW,
    client_of,
    csrf_of,
    dash_app,
    page,
)
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.scheduling_kit import parts_of


class HeldOpenAI(FakeOpenAI):
    """Answers only once ``release`` is set; ``reached`` is set when a request arrives,
    ``arrived`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.arrived = 0

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.arrived += 1
        self.reached.set()
        await self.release.wait()
        return await super().answer(request)


@contextlib.asynccontextmanager
async def _app(app_db: AppDb, tmp_path: Path, db_name: str, api: FakeOpenAI) -> AsyncIterator[App]:
    """The app with the scheduler (no timer) and the model from settings; two of them on
    one database stand for two processes."""
    config = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db_name,
        data_dir=tmp_path / uuid.uuid4().hex[:6],
        admin_token=ADMIN,
        timezone="Europe/Berlin",
        openai_api_key="sk-test",
        openai_base_url=api.base_url,
    )
    features = [scheduling(SchedulingOptions(timer=False))]
    async with build_app(
        config,
        embedded=app_db.server,
        channels=[RecordingChannel()],
        clock=FakeClock(NOW),
        features=features,
    ) as app:
        yield app


async def _click(client: TestClient[Any, Any], job_id: str) -> tuple[int, str]:
    """Press "Run now" as the page offers it: the status answered, then the flash shown."""
    csrf = csrf_of(await page(client, "/jobs"))
    resp = await client.post(
        f"/jobs/{job_id}/run", data={"csrf": csrf}, headers=AUTH, allow_redirects=False
    )
    assert resp.headers.get("Location") == "/jobs"
    return resp.status, html.unescape(await page(client, "/jobs"))


async def test_run_now_answers_at_once_and_refuses_a_second_click_until_it_ends(
    app_db: AppDb, tmp_path: Path
) -> None:
    db_name = f"runnow_{uuid.uuid4().hex[:10]}"
    async with HeldOpenAI() as api:
        api.default = Answer(200, api.completion("The news: all quiet."))
        async with (
            _app(app_db, tmp_path, db_name, api) as first,
            _app(app_db, tmp_path, db_name, api) as second,
        ):
            try:
                job = await parts_of(first).jobs.create(
                    name="Morning news", instruction="Read the news", cron_expression="0 7 * * *"
                )
                runs = first.deps.db["runs"]
                # The SDK loaded before the clicks: a first request's ``import openai``
                # racing the warm-up thread can fail the run (noticed here, not ours).
                await warm_model(first.agent.model)
                async with client_of(first) as one, client_of(second) as other:
                    # The first click answers while the model has not answered.
                    async with asyncio.timeout(10):  # it used to wait for the whole run
                        status, shown = await _click(one, job.id)
                    assert status == 303 and not api.release.is_set()
                    assert "Started “Morning news”; its answer goes to" in shown
                    async with asyncio.timeout(10):
                        await api.reached.wait()  # the run is under way, at the model
                    assert await runs.count_documents({"job_id": job.id}) == 1

                    # A second click, here or in another process: refused, nothing started.
                    for client in (one, other):
                        status, shown = await _click(client, job.id)
                        assert status == 303
                        assert "“Morning news” is already running (since 15:00, now); " in shown
                        assert "not started again." in shown
                    assert await runs.count_documents({"job_id": job.id}) == 1
                    assert api.arrived == 1

                    # The model answers; the run ends; a click starts a new one.
                    api.release.set()
                    await parts_of(first).engine.join()
                    run = await runs.find_one({"job_id": job.id})
                    assert run is not None
                    assert (run["trigger"], run["status"]) == ("manual", "success")
                    status, shown = await _click(other, job.id)
                    assert "Started “Morning news”" in shown
                    await parts_of(second).engine.join()
                    done = await runs.find({"job_id": job.id}).to_list()
                    assert [r["status"] for r in done] == ["success", "success"]
                    assert api.arrived == 2
            finally:
                api.release.set()
                await first.database.client.drop_database(db_name)


async def test_a_claim_left_by_a_process_that_died_frees_after_a_run_lease(
    app_db: AppDb, tmp_path: Path
) -> None:
    """A process killed during a run by hand leaves its claim behind: a click is refused
    while that could still be a run starting, and goes through once it cannot."""
    clock = FakeClock(NOW)
    async with dash_app(app_db, tmp_path, clock) as app:
        parts = parts_of(app)
        job = await parts.jobs.create(
            name="Backups", instruction="Check the backups", cron_expression="0 3 * * *"
        )
        leases = app.deps.db["leases"]
        await leases.insert_one(
            {"key": run_now_key(job.id), "owner": "gone:1:dead", "created_at": clock(),
             "expires_at": clock() + timedelta(days=7)}
        )  # fmt: skip
        with pytest.raises(AlreadyRunning):
            await parts.engine.start_now(job)
        clock.advance(seconds=31)  # longer than a run lease lasts unrenewed
        await parts.engine.start_now(job)
        await parts.engine.join()
        run = await app.deps.db["runs"].find_one({"job_id": job.id})
        assert run is not None and run["status"] == "success"
        assert await leases.count_documents({"key": run_now_key(job.id)}) == 0  # let go


async def test_the_pulse_api_refuses_a_second_run_while_one_is_under_way(
    app_db: AppDb, tmp_path: Path
) -> None:
    """``POST /api/pulse/run`` keeps its contract (it answers the run record when the run
    ends) but a second one while a pulse is under way, here or in another process, is
    refused with 409 rather than queued behind it."""
    db_name = f"pulsenow_{uuid.uuid4().hex[:10]}"
    async with HeldOpenAI() as api:
        api.default = Answer(200, api.completion("All quiet."))
        async with (
            _app(app_db, tmp_path, db_name, api) as first,
            _app(app_db, tmp_path, db_name, api) as second,
        ):
            try:
                await warm_model(first.agent.model)  # see the test above
                async with client_of(first) as one, client_of(second) as other:
                    running = asyncio.create_task(one.post("/api/pulse/run", headers=AUTH))
                    async with asyncio.timeout(10):
                        await api.reached.wait()
                    for client in (one, other):
                        async with asyncio.timeout(10):  # it used to queue a second run
                            refused = await client.post("/api/pulse/run", headers=AUTH)
                        body = await refused.json()
                        assert refused.status == 409, body
                        assert body["error"] == "a pulse is already running; not started again"
                        assert datetime.fromisoformat(body["since"]) == NOW
                    assert not running.done() and api.arrived == 1
                    api.release.set()
                    ran = await running
                    assert ran.status == 200 and (await ran.json())["status"] == "success"
                    again = await other.post("/api/pulse/run", headers=AUTH)
                    assert again.status == 200 and (await again.json())["trigger"] == "api"
                assert api.arrived == 2
            finally:
                api.release.set()
                await first.database.client.drop_database(db_name)
