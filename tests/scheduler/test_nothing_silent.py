"""Nothing silent (issue 30, item 5): every scheduled fire ends in exactly one recorded
state within its grace window, and the owner hears of each that did not run.

The four ends, each proven here through the whole app (real alert router, fake Twilio,
a recording Telegram chat, the scheduler's timers off and a fake clock):

* delivered: the run succeeded and its answer went to the chat;
* failed and alerted: the run could not complete within its window (tries included);
* skipped with a reason: a later fire inside the window ran instead (``superseded``);
* missed and alerted: its moment passed, past the grace window, while Watchkeeper was
  down or stalled; after a restart long past it, each such fire has one ``missed``
  record, the owner gets one alert for them, and the Runs page says ``missed``.

A fire claimed but whose record could not be written ends failed and alerted too.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect

from agent.app.features.scheduling import SchedulingOptions, scheduling
from scheduler.cron.job import CronJob
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, START, Harness, alert_app
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel, unavailable
from tests.scheduler.test_fires_never_lost import database_down
from tests.scheduling_kit import parts_of

Doc = dict[str, Any]
GRACE = timedelta(minutes=10)
ANSWER = "Backups are fine."


@contextlib.asynccontextmanager
async def pager(
    app_db: AppDb,
    clock: FakeClock,
    *,
    db_name: str | None = None,
    model: ScriptedModel | None = None,
    **settings: Any,
) -> AsyncIterator[Harness]:
    """The app with the alert router and the scheduler (pulse off, timers off)."""
    options = SchedulingOptions(timer=False, grace=GRACE)
    async with alert_app(
        app_db,
        db_name=db_name,
        clock=clock,
        model=model or ScriptedModel(lambda r: ANSWER),
        features=(scheduling(options),),
        **settings,
    ) as h:
        await parts_of(h.app).pulse.update_config(enabled=False)
        yield h


async def _job(h: Harness, expression: str = "5 8 * * *", **fields: Any) -> CronJob:
    return await parts_of(h.app).jobs.create(
        name="Backups", instruction="check the backups", cron_expression=expression,
        timezone="UTC", origin_channel="telegram", origin_chat_id="4242", **fields,
    )  # fmt: skip


async def _runs(h: Harness) -> list[Doc]:
    return await h.app.deps.db["runs"].find({}, sort=[("scheduled_for", 1)]).to_list()


async def _alerts(h: Harness) -> list[Doc]:
    return await h.app.deps.db["alerts"].find({}).to_list()


def _one_record_per_fire(runs: list[Doc]) -> None:
    fires = [(run["job_id"], run["scheduled_for"]) for run in runs]
    assert len(fires) == len(set(fires)), fires
    assert all(run["status"] != "running" and "retry_at" not in run for run in runs)


async def test_delivered(app_db: AppDb) -> None:
    clock = FakeClock(START.replace(hour=8, minute=0))
    async with pager(app_db, clock) as h:
        await _job(h)
        clock.set(START.replace(hour=8, minute=5, second=1))
        await parts_of(h.app).engine.run_due()
        await h.app.outbox.run_due()
        [run] = await _runs(h)
        assert run["status"] == "success" and run["delivery"]["idempotency_key"]
        assert f"Backups\n{ANSWER}" in h.chat.texts()
        assert await _alerts(h) == []


async def test_failed_and_alerted(app_db: AppDb) -> None:
    """The model never comes back in the window: one record, failed, given up, alerted."""
    clock = FakeClock(START.replace(hour=8, minute=0))
    model = ScriptedModel(lambda r: unavailable())
    async with pager(app_db, clock, model=model) as h:
        await _job(h)
        engine = parts_of(h.app).engine
        clock.set(START.replace(hour=8, minute=5, second=1))
        await engine.run_due()
        while (at := await parts_of(h.app).runs.next_retry()) is not None:
            clock.set(at)
            await engine.run_due()
        [run] = await _runs(h)
        assert run["status"] == "failed" and run["reason"] == "model_unavailable"
        assert run["gave_up"] is True
        [alert] = await _alerts(h)
        assert "Backups" in alert["title"] and "could not run" in alert["title"]


async def test_skipped_with_a_reason(app_db: AppDb) -> None:
    """A stall shorter than the grace window: the latest fire runs, the one before it is
    recorded superseded, and that is no news for the owner."""
    clock = FakeClock(START.replace(hour=8, minute=0, second=30))
    async with pager(app_db, clock) as h:
        job = await _job(h, "*/5 * * * *")
        clock.set(START.replace(hour=8, minute=12))  # 08:05 and 08:10 came due meanwhile
        await parts_of(h.app).engine.run_due()
        runs = await _runs(h)
        assert [(r["scheduled_for"].minute, r["status"], r["reason"]) for r in runs] == [
            (5, "skipped", "superseded"),
            (10, "success", None),
        ]
        assert runs[0]["error"].startswith("superseded by a later fire")
        assert await _alerts(h) == [] and job.id == runs[0]["job_id"]


async def test_missed_and_alerted_after_a_restart_long_past_the_grace_window(
    app_db: AppDb, mongo_client: AsyncMongoClient[Doc]
) -> None:
    name = f"silent_{uuid.uuid4().hex[:10]}"
    clock = FakeClock(START.replace(hour=7, minute=0))
    try:
        async with pager(app_db, clock, db_name=name) as h:
            hourly = await _job(h, "0 * * * *")
            await _job(h, "30 9 * * *", on_failure="none")  # quiet by the owner's choice
        clock.set(START.replace(hour=10, minute=20))  # down from 07:00 to 10:20
        async with pager(app_db, clock, db_name=name) as h:
            fires = await parts_of(h.app).engine.run_due()
            assert sorted(f.action for f in fires) == ["missed"] * 4
            await parts_of(h.app).engine.join()
            runs = await _runs(h)
            _one_record_per_fire(runs)
            assert [(r["scheduled_for"].strftime("%H:%M"), r["reason"]) for r in runs] == [
                ("08:00", "missed"),
                ("09:00", "missed"),
                ("09:30", "missed"),
                ("10:00", "missed"),
            ]
            assert all(r["status"] == "skipped" and "alert_pending" not in r for r in runs)
            [alert] = await _alerts(h)
            assert alert["title"] == "Cron job “Backups” missed 3 scheduled runs"
            assert "Thu 26 Nov 08:00, Thu 26 Nov 09:00, Thu 26 Nov 10:00" in alert["body"]
            assert "09:30" not in alert["body"] and alert["severity"] == "warning"
            assert (await parts_of(h.app).jobs.get(hourly.id)).next_fire_at == START.replace(
                hour=11
            )
            resp = await h.client.get("/runs", headers={"Authorization": f"Bearer {ADMIN}"})
            assert resp.status == 200
            text = await resp.text()
            assert "4 scheduled runs missed in the last 7 days" in text
            assert text.count('<span class="badge bad">missed</span>') == 4
            assert text.count('data-status="missed"') >= 4
    finally:
        await mongo_client.drop_database(name)


async def test_an_alert_cut_off_by_a_stop_goes_out_at_the_next_start(
    app_db: AppDb, mongo_client: AsyncMongoClient[Doc]
) -> None:
    """The missed fires were recorded, then the process stopped before their alert went
    out (here: the record still says ``alert_pending``): the next start tells, once."""
    name = f"silent_{uuid.uuid4().hex[:10]}"
    clock = FakeClock(START.replace(hour=7, minute=0))
    try:
        async with pager(app_db, clock, db_name=name) as h:
            await _job(h, "0 * * * *")
            clock.set(START.replace(hour=9, minute=30))
            await parts_of(h.app).engine.run_due()
            await parts_of(h.app).engine.join()
            assert len(await _alerts(h)) == 1
            runs = h.app.deps.db["runs"]
            # As the record stands when the process stops between the two writes:
            await runs.update_many({}, {"$set": {"alert_pending": True}})
            await h.app.deps.db["alerts"].delete_many({})
        async with pager(app_db, clock, db_name=name) as h:
            [alert] = await _alerts(h)
            assert alert["title"] == "Cron job “Backups” missed 2 scheduled runs"
            assert await h.app.deps.db["runs"].count_documents({"alert_pending": True}) == 0
        async with pager(app_db, clock, db_name=name) as h:
            assert len(await _alerts(h)) == 1  # told once, not at every start
    finally:
        await mongo_client.drop_database(name)


async def test_a_claimed_fire_whose_record_cannot_be_written_is_recorded_lost_and_alerted(
    app_db: AppDb, mongo_client: AsyncMongoClient[Doc]
) -> None:
    """The sweep claims the missed fires (the leases insert), then writing their records
    fails, and its retry too: they are not left claimed and unrecorded; the next sweep
    records them failed (the database could not be reached) and the owner is alerted."""
    app_name = f"silent-{uuid.uuid4().hex[:8]}"
    clock = FakeClock(START.replace(hour=7, minute=0))
    uri = f"{app_db.uri}?directConnection=true&retryWrites=false&appName={app_name}"
    async with pager(app_db, clock, mongodb_uri=uri) as h:
        await _job(h, "0 * * * *")
        engine = parts_of(h.app).engine
        clock.set(START.replace(hour=9, minute=30))  # 08:00 and 09:00 missed
        async with database_down(mongo_client, app_name, {"skip": 1, "times": 2}, ["insert"]):
            with pytest.raises(AutoReconnect):
                await engine.run_due()
        assert await _runs(h) == []
        clock.set(START.replace(hour=9, minute=31))
        await engine.run_due()
        await engine.join()
        runs = await _runs(h)
        _one_record_per_fire(runs)
        assert [(r["scheduled_for"].hour, r["status"], r["reason"]) for r in runs] == [
            (8, "failed", "database_unavailable"),
            (9, "failed", "database_unavailable"),
        ]
        [alert] = await _alerts(h)
        assert "Backups" in alert["title"] and "could not run" in alert["title"]
        assert (await parts_of(h.app).jobs.get(runs[0]["job_id"])).next_fire_at == START.replace(
            hour=10
        )
