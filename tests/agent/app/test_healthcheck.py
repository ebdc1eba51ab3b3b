"""The dead man's switch and ``/healthz`` (issue 30, item 3), against a local receiver.

The receiver is a small aiohttp server that keeps what Healthchecks.io would get: a
``GET`` ping on the check's URL, or a ``POST`` to ``<url>/fail`` with the reason as its
body. The app runs with the real scheduling feature (timers off, a fake clock) and the
switch at a short interval; the database "stops" through SecantusDB's ``failCommand``
failpoint for the app's own client, or for real (an embedded server killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pymongo import AsyncMongoClient

from agent.app.core import App, build_app
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.app.healthcheck import (
    Component,
    DeadMansSwitch,
    Health,
    HealthSources,
    collect,
    fail_url,
    healthcheck,
)
from agent.app.http import make_web_app
from channels.delivery.outbox import Outbox
from storage.db import open_database
from storage.embedded.owner import EmbeddedServer
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.huge_answer import MIB, huge_answer
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import call_tool, parts_of
from tests.waiting import until

Doc = dict[str, Any]
START = datetime(2026, 3, 6, 8, 0, tzinfo=UTC)
SECRET = "0f8fad5b-d9cb-469f-a165-70867728950e"
"""The check's UUID in its URL: never in a log line, nor in ``/healthz``."""
INTERVAL = 0.05


@dataclass
class Receiver:
    """Healthchecks.io as far as the switch can tell: every request it got."""

    url: str = ""
    got: list[tuple[str, str, str]] = field(default_factory=list)

    def pings(self) -> list[tuple[str, str, str]]:
        return [hit for hit in self.got if not hit[1].endswith("/fail")]

    def fails(self) -> list[str]:
        return [body for method, path, body in self.got if path.endswith("/fail")]

    def pinged_after(self, count: int) -> bool:
        """A ping came after the first ``count`` requests, and nothing failed since it."""
        later = [path.endswith("/fail") for _method, path, _body in self.got[count:]]
        return False in later and not any(later[later.index(False) :])


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    seen = Receiver()

    async def hit(request: web.Request) -> web.Response:
        seen.got.append((request.method, request.path, (await request.read()).decode()))
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hit)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    seen.url = f"http://127.0.0.1:{port}/ping/{SECRET}"
    try:
        yield seen
    finally:
        await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def watched_app(
    app_db: AppDb,
    tmp_path: Path,
    url: str,
    *,
    channel: RecordingChannel | None = None,
    clock: FakeClock | None = None,
    name: str | None = None,
) -> AsyncIterator[App]:
    """The app with the scheduler (timers off) and the switch pinging ``url``."""
    uri = app_db.mongodb_uri
    if name:  # a failpoint picks the app's client by its name, which only a URI gives
        uri = f"{app_db.uri}?directConnection=true&retryWrites=false&appName={name}"
    settings = make_settings(
        mongodb_uri=uri,
        mongodb_db=f"health_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        healthcheck_url=url,
    )
    async with build_app(
        settings,
        embedded=app_db.server,
        model=ScriptedModel(lambda r: "ok"),
        channels=[channel or RecordingChannel()],
        clock=clock or FakeClock(START),
        features=[scheduling(SchedulingOptions(timer=False)), healthcheck(INTERVAL)],
    ) as app:
        await parts_of(app).pulse.update_config(enabled=False)
        try:
            yield app
        finally:
            await app.database.client.drop_database(settings.mongodb_db)


@contextlib.asynccontextmanager
async def database_silent(client: AsyncMongoClient[Doc], app_name: str) -> AsyncIterator[None]:
    """The app's client gets no answer: every command it sends has its connection dropped."""
    data = {
        "failCommands": ["ping", "find", "count", "aggregate", "insert", "update"],
        "closeConnection": True,
        "appName": app_name,
    }
    await client.admin.command(
        {"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": data}
    )
    try:
        yield
    finally:
        await client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


@contextlib.asynccontextmanager
async def served(app: App) -> AsyncIterator[Callable[[], Awaitable[tuple[int, Doc, str]]]]:
    """The app's HTTP server (started while the database answers: the dashboard reads it
    as it starts); yields ``GET /healthz``: its status, JSON and text."""
    client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
    await client.start_server()

    async def healthz() -> tuple[int, Doc, str]:
        resp = await client.get("/healthz")
        return resp.status, await resp.json(), await resp.text()

    try:
        yield healthz
    finally:
        await client.close()


async def _healthz(app: App) -> tuple[int, Doc, str]:
    async with served(app) as healthz:
        return await healthz()


# --- the switch -----------------------------------------------------------------------


async def test_pings_arrive_at_the_interval_while_all_is_well(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with receiver() as hc, watched_app(app_db, tmp_path, hc.url):
        await until(lambda: len(hc.pings()) >= 3, "three pings")
        assert hc.fails() == []
        assert all(method == "GET" and path == f"/ping/{SECRET}" for method, path, _ in hc.pings())


async def test_a_channel_down_fails_the_check_with_its_name(app_db: AppDb, tmp_path: Path) -> None:
    channel = RecordingChannel("telegram")
    async with receiver() as hc, watched_app(app_db, tmp_path, hc.url, channel=channel):
        await until(lambda: hc.pings(), "a first ping")
        channel.connected = False
        await until(lambda: hc.fails(), "a /fail")
        assert hc.fails()[0] == "channel telegram down"
        channel.connected = True
        seen = len(hc.got)
        await until(lambda: hc.pinged_after(seen), "pings again")


async def test_a_fire_overdue_past_its_grace_fails_the_check(app_db: AppDb, tmp_path: Path) -> None:
    clock = FakeClock(START)
    async with receiver() as hc, watched_app(app_db, tmp_path, hc.url, clock=clock) as app:
        created = await call_tool(
            app,
            "manage_cronjob",
            action="create",
            name="Backups",
            instruction="check the backups",
            cron_expression="5 8 * * *",
            timezone="UTC",
        )
        job_id = created["created"]["job_id"]
        await until(lambda: hc.pings(), "a first ping")
        clock.set(START + timedelta(minutes=10))  # due at 08:05, within its grace: fine
        seen = len(hc.got)
        await until(lambda: len(hc.got) >= seen + 2, "two more checks")
        assert hc.fails() == []
        clock.set(START + timedelta(minutes=16))  # 08:16: 11 min late, grace 10 min
        await until(lambda: hc.fails(), "a /fail")
        assert hc.fails()[0] == (f"scheduler: cron job {job_id} overdue by 11 min (grace 10 min)")
        status, body, text = await _healthz(app)
        assert status == 200 and body["status"] == "degraded" and "scheduler" in body["degraded"]
        assert body["components"]["scheduler"]["overdue"][0]["job_id"] == job_id
        assert "Backups" not in text and "check the backups" not in text
        await parts_of(app).engine.run_due()  # the sweep handles it (recorded missed)
        seen = len(hc.got)
        await until(lambda: hc.pinged_after(seen), "pings again")


async def test_a_silent_database_fails_the_check(
    app_db: AppDb, mongo_client: AsyncMongoClient[Doc], tmp_path: Path
) -> None:
    name = f"health-{uuid.uuid4().hex[:8]}"
    async with receiver() as hc, watched_app(app_db, tmp_path, hc.url, name=name) as app:
        await until(lambda: hc.pings(), "a first ping")
        async with served(app) as healthz, database_silent(mongo_client, name):
            await until(lambda: hc.fails(), "a /fail")
            status, body, _text = await healthz()
        assert hc.fails()[0] == "database busy"
        assert status == 503 and body["db"] == "busy" and body["status"] == "down"
        assert body["components"]["scheduler"]["state"] == "unknown"
        seen = len(hc.got)
        await until(lambda: hc.pinged_after(seen), "pings again")


async def test_an_unreachable_receiver_is_logged_once_and_crashes_nothing(
    app_db: AppDb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The receiver hangs up on every ping: three tries, one warning, the app goes on."""
    caplog.set_level(logging.INFO, logger="agent.app.healthcheck")
    tries: list[int] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tries.append(1)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        url = f"http://127.0.0.1:{port}/ping/{SECRET}"
        async with watched_app(app_db, tmp_path, url) as app:
            await until(lambda: len(tries) >= 3, "three pings tried")
            status, _body, _text = await _healthz(app)  # the app goes on
            assert status == 200
    finally:
        server.close()
        await server.wait_closed()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "healthcheck: ping to 127.0.0.1 failed (ServerDisconnectedError); "
        "not logged again until one succeeds"
    ]
    assert SECRET not in caplog.text


async def test_the_switch_keeps_beating_through_an_outage_and_says_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.app.healthcheck")
    port = closed_port()
    url = f"http://127.0.0.1:{port}/ping/{SECRET}"
    hits: list[str] = []

    async def well() -> Health:
        return Health("ok", Component("ok"), {}, {})

    async with aiohttp.ClientSession() as http:
        switch = DeadMansSwitch(url, interval=INTERVAL, check=well, http=http)
        for _ in range(3):
            assert await switch.beat() is False
        app = web.Application()

        async def hit(request: web.Request) -> web.Response:
            hits.append(request.path)
            return web.Response(text="OK")

        app.router.add_route("*", "/{tail:.*}", hit)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            assert await switch.beat() is True
        finally:
            await runner.cleanup()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed" in m for m in messages) == 1
    assert sum("reach 127.0.0.1 again" in m for m in messages) == 1
    assert hits == [f"/ping/{SECRET}"] and switch.pings == 1
    assert SECRET not in caplog.text


async def test_a_check_that_raises_is_reported_as_a_failure() -> None:
    async def broken() -> Health:
        raise RuntimeError("a bug")

    async with receiver() as hc, aiohttp.ClientSession() as http:
        switch = DeadMansSwitch(hc.url, interval=INTERVAL, check=broken, http=http)
        assert await switch.beat() is False  # held back: it may pass
        assert hc.got == []
        assert await switch.beat() is True
    assert hc.fails() == ["health check failed: RuntimeError"]


async def test_a_receiver_answering_a_huge_body_costs_a_bounded_read() -> None:
    """Issue 36, point 10: a 1 GB answer from ``HEALTHCHECK_URL`` took the agent from
    230 MB to 2,185 MB. The answer says nothing the switch needs: the ping counts as
    delivered, the connection is closed past ``ANSWER_LIMIT``, the rest never read."""

    async def well() -> Health:
        return Health("ok", Component("ok"), {}, {})

    async with huge_answer(64 * MIB) as hc, aiohttp.ClientSession() as http:
        switch = DeadMansSwitch(hc.url, interval=30, check=well, http=http)
        assert await switch.beat() is True and switch.pings == 1
        await hc.done.wait()
        assert hc.sent < 16 * MIB  # the cap plus what socket buffers hold


def test_bad_switch_settings_are_refused_clearly() -> None:
    async def well() -> Health:
        return Health("ok", Component("ok"), {}, {})

    session: Any = object()  # never used: the constructor refuses first
    with pytest.raises(ValueError, match="interval must be positive"):
        DeadMansSwitch("https://hc-ping.com/x", interval=0, check=well, http=session)
    with pytest.raises(ValueError, match="fail_after must be at least 1"):
        DeadMansSwitch("https://hc-ping.com/x", interval=5, check=well, http=session, fail_after=0)
    with pytest.raises(ValueError, match="http\\(s\\) URL with a host"):
        DeadMansSwitch("ftp://hc-ping.com/x", interval=5, check=well, http=session)
    with pytest.raises(ValueError, match=r"healthcheck_interval_seconds\n.* than or equal to 5"):
        make_settings(healthcheck_interval_seconds=4)


def test_the_fail_url_keeps_the_query() -> None:
    assert fail_url("https://hc-ping.com/abc/") == "https://hc-ping.com/abc/fail"
    assert fail_url("https://hc.example/ping/k?rid=1") == "https://hc.example/ping/k/fail?rid=1"


# --- /healthz -------------------------------------------------------------------------


async def test_healthz_lists_what_is_degraded_and_no_secrets(app_db: AppDb, tmp_path: Path) -> None:
    channel = RecordingChannel("whatsapp", connected=False)
    async with (
        receiver() as hc,
        watched_app(app_db, tmp_path, hc.url, channel=channel) as app,
    ):
        status, body, text = await _healthz(app)
    assert status == 200
    assert body["status"] == "degraded" and body["db"] == "ok"
    assert body["degraded"] == ["channel:whatsapp"]
    assert body["channels"] == {"whatsapp": False} and body["scheduler"] == "running"
    parts = body["components"]
    assert parts["channels"]["whatsapp"] == {"state": "down", "connected": False}
    assert parts["scheduler"]["state"] == "ok" and parts["scheduler"]["overdue"] == []
    assert parts["outbox"] == {
        "state": "ok", "pending": 0, "failed": 0, "oldest_pending_at": None
    }  # fmt: skip
    assert parts["model"]["state"] == "unknown" and parts["mcp"]["state"] == "off"
    assert body["reason"] == "channel whatsapp down"
    assert SECRET not in text and "127.0.0.1" not in text


async def test_healthz_answers_503_when_the_database_is_gone(
    tmp_path: Path, private_embedded: EmbeddedServer
) -> None:
    server = private_embedded
    async with open_database(None, "gone", tmp_path, server=server) as database:
        sources = HealthSources(
            database, {}, Outbox(database.db, {}, FakeClock(START)), FakeClock(START)
        )
        assert (await collect(sources)).database_ok
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await until_gone(sources)
        health = await collect(sources)
    view = health.view()
    assert view["db"] == "unreachable" and view["status"] == "down"
    assert health.reason == "database unreachable" and view["degraded"] == ["database"]


async def until_gone(sources: HealthSources) -> None:
    for _ in range(50):
        if await sources.database.health(seconds=0.3) == "unreachable":
            return
    raise AssertionError("the killed server still answers")


async def test_a_check_cut_short_leaves_no_coroutine_unawaited(
    app_db: AppDb, tmp_path: Path
) -> None:
    """A check cancelled at any step (the switch's own deadline, a stop) leaves nothing
    behind: before, a gather cancelled before its tasks ran left their checks made and
    never awaited ("coroutine 'model_health' was never awaited" at the next collection)."""
    async with receiver() as hc, watched_app(app_db, tmp_path, hc.url) as app:
        sources = HealthSources.of_app(app)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for steps in range(40):
                task = asyncio.create_task(collect(sources))
                for _ in range(steps):
                    await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # Once for all 40: a coroutine never awaited warns when it is freed, and
            # what its cycles still hold is freed here (each collection walks the whole
            # test session's heap: 0.4 s).
            gc.collect()
        assert await collect(sources)  # and a whole check still answers
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert unawaited == []
