"""Keeping watch through quiet stretches (issue #10, item 1).

SecantusDB closes a client connection that has been silent for its idle timeout (300 s
by default); pymongo keeps the dead connection pooled and the next write on it fails
with ``AutoReconnect``. Here the server's idle timeout is 0.6 s, so a quiet stretch
takes a second instead of six minutes. Each stretch lasts until the server has closed
every idle connection (``UnheardCloseRelay.quiet``), however long a busy machine takes.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect, DuplicateKeyError

from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.features.scheduling import SchedulingOptions, scheduling
from storage import retry
from storage.db import make_client, open_database
from tests.conftest import make_settings
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.fakes.unheard_close import UnheardCloseRelay
from tests.scheduling_kit import call_tool, inbound, parts_of
from tests.storage.conftest import IDLE
from tests.waiting import WATCHDOG

Doc = dict[str, Any]


async def _warm(client: AsyncMongoClient[Doc], name: str, connections: int = 4) -> None:
    """Put a few connections in the pool (concurrent writes each take their own)."""
    coll = client["quiet"][name]
    await asyncio.gather(*(coll.insert_one({"warm": i}) for i in range(connections)))


async def test_a_bare_client_loses_its_first_write_after_a_quiet_stretch(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    """The failure itself, so the tests below are known to exercise it."""
    await _warm(bare_client, "bare")
    await relay.quiet()
    assert relay.server_closes >= 4  # the four pooled connections, at least
    with pytest.raises(AutoReconnect):
        await bare_client["quiet"]["bare"].insert_one({"after": "quiet"})


async def test_our_client_drops_idle_connections_before_the_server_closes_them(
    relay: UnheardCloseRelay,
) -> None:
    client = make_client(relay.uri, embedded=True, server_idle_timeout=IDLE)
    try:
        await _warm(client, "ours")
        for round_ in range(2):
            await relay.quiet()  # whatever the client kept pooled, the server closed
            await client["quiet"]["ours"].insert_one({"after": "quiet", "round": round_})
    finally:
        await client.close()


async def test_a_uri_that_sets_max_idle_time_keeps_its_own_setting(quiet_server: str) -> None:
    client = make_client(f"{quiet_server}?directConnection=true&maxIdleTimeMS=250")
    try:
        assert client.options.pool_options.max_idle_time_seconds == 0.25
    finally:
        await client.close()
    default = make_client(quiet_server)
    try:
        assert default.options.pool_options.max_idle_time_seconds == 150.0
    finally:
        await default.close()


async def test_the_embedded_server_takes_the_idle_timeout_and_its_client_stays_under_it(
    tmp_path: Path,
) -> None:
    async with open_database(None, "quiet", tmp_path / "data", idle_timeout=IDLE) as database:
        assert database.embedded
        assert database.client.options.pool_options.max_idle_time_seconds == IDLE / 2
        coll = database.db["notes"]
        await asyncio.gather(*(coll.insert_one({"warm": i}) for i in range(3)))
        # The child server really closes silent connections after IDLE seconds...
        host, port = next(iter(database.client.topology_description.server_descriptions()))
        reader, writer = await asyncio.open_connection(host, port)
        try:
            async with asyncio.timeout(WATCHDOG):
                assert await reader.read(1) == b""  # its FIN, some IDLE seconds later
        finally:
            writer.close()
        # ...and the app's own client never hands out one of those: its pooled
        # connections went silent before this one opened, so they are closed too.
        await coll.insert_one({"after": "quiet"})
        assert await coll.count_documents({}) == 4


async def test_each_kind_of_write_survives_a_dropped_connection_once(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    coll = bare_client["quiet"][f"w_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    await coll.insert_many([{"key": "b"}, {"key": "c"}])
    await _warm(bare_client, coll.name, connections=6)
    await relay.quiet()  # every pooled connection is closed by the server now
    taken, updated, *_ = await asyncio.gather(
        retry.claim(coll, {"key": "b"}, {"$inc": {"n": 1}}),
        retry.retried(lambda: coll.update_one({"key": "c"}, {"$set": {"seen": True}}), "mark"),
        retry.insert(coll, {"key": "a"}),
        retry.insert_many(coll, [{"key": "d"}, {"key": "e"}], ordered=False),
    )
    assert taken is not None and taken["n"] == 1
    assert updated.matched_count == 1
    assert await coll.count_documents({"key": {"$in": ["a", "d", "e"]}}) == 3
    with pytest.raises(DuplicateKeyError):  # a real duplicate is still one
        await retry.insert(coll, {"key": "a"})


async def test_a_retried_insert_that_landed_the_first_time_is_not_a_duplicate(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    """The reply of a write can be lost after the server applied it: the retry must see
    its own document there, not report a duplicate."""
    coll = bare_client["quiet"][f"l_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    doc: Doc = {"key": "x"}
    await coll.insert_one(dict(doc, _id="landed"))  # what the lost first try stored
    await _warm(bare_client, coll.name)
    await relay.quiet()
    await retry.insert(coll, dict(doc, _id="landed"))  # dropped, retried, found: fine
    many = [{"_id": "m1", "key": "m1"}, {"_id": "m2", "key": "m2"}]
    await coll.insert_one(dict(many[0]))
    await _warm(bare_client, coll.name)
    await relay.quiet()
    await retry.insert_many(coll, many)  # only the missing one is inserted on the retry
    assert await coll.count_documents({"_id": {"$in": ["m1", "m2"]}}) == 2


async def test_the_app_keeps_watch_through_quiet_stretches(
    relay: UnheardCloseRelay, tmp_path: Path
) -> None:
    """An inbox write, a cron fire and an alert tick, each after a quiet stretch longer
    than the server's idle timeout, on the app's own client."""
    clock = FakeClock(datetime(2026, 3, 6, 8, 0, tzinfo=UTC))
    channel = RecordingChannel()
    model = ScriptedModel(lambda _request: "All backups are fine.")
    settings = make_settings(
        # As the embedded database's client connects: no retryable writes (storage.db).
        mongodb_uri=f"{relay.uri}?directConnection=true&retryWrites=false",
        mongodb_db=f"quiet_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        openai_api_key="sk-test",
    )
    async with build_app(
        settings,
        model=model,
        channels=[channel],
        clock=clock,
        features=[
            alerting(AlertingOptions(background=False)),
            scheduling(SchedulingOptions(timer=False)),
        ],
    ) as app:
        parts = parts_of(app)
        await parts.pulse.update_config(enabled=False)
        created = await call_tool(
            app,
            "manage_cronjob",
            action="create",
            name="Backups",
            instruction="check the backups",
            cron_expression="5 8 * * *",
            timezone="UTC",
        )
        job = created["created"]
        # The outbox polls every second, which keeps one pooled connection warm while
        # concurrent work takes the stale ones; with its loop paused every pooled
        # connection goes stale, the worst case. Replies are still sent at once.
        await app.outbox.stop()

        await relay.quiet()
        assert await app.pipeline.submit(inbound("hello after a quiet night")) is True
        await app.pipeline.join()
        assert "All backups are fine." in channel.texts()

        await relay.quiet()
        clock.advance(minutes=6)  # the job came due a minute ago
        fires = await parts.engine.run_due()
        assert [f.action for f in fires] == ["run"]
        runs = await app.deps.db["runs"].find({"job_id": job["job_id"]}).to_list()
        assert [r["status"] for r in runs] == ["success"]
        assert channel.texts().count("Backups\nAll backups are fine.") == 1

        router = app.deps.alerts
        assert router is not None
        await router.raise_alert(severity="info", title="Disk almost full", body="91 %")
        delivered = len(channel.sent)
        await router.store.change(
            (await router.store.unresolved())[0].id,
            set_={"next_action": "deliver", "next_escalation_at": clock() + timedelta(minutes=1)},
        )
        await relay.quiet()
        assert await router.tick(clock.advance(minutes=2)) == 1
        assert len(channel.sent) == delivered + 1
