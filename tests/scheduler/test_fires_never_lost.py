"""A scheduled fire is never lost silently (issue #10, item 2).

When the model or the database is away as a cron job comes due, the fire is tried
again inside its grace window and runs once; if it never can, it is recorded
``failed`` with a typed reason and the owner is warned; either way the job's next
fire is the scheduled one. The database "goes away" through SecantusDB's
``failCommand`` failpoint, scoped to the app's own client (``appName``), which drops
the connection under every command as a restarting server would.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import AutoReconnect

from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from agent.owner import OwnerSettings
from runtime.backoff import Backoff
from scheduler.cron.job import CronJob, JobReader
from scheduler.cron.service import CronService
from scheduler.engine import Engine
from scheduler.fires.recorder import RunRecorder, RunTicket, Skip
from scheduler.pulse.store import PulseStore
from storage.repos.cron_jobs import CronJobStore
from storage.repos.leases import LeaseStore
from storage.repos.pulse import PulseRepo
from storage.repos.runs.record import Outcome, Trigger
from storage.repos.runs.store import RunStore
from tests.conftest import make_settings
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.features import providing
from tests.fakes.scripted import Request, ScriptedModel, unavailable
from tests.scheduling_kit import call_tool, parts_of

Doc = dict[str, Any]
START = datetime(2026, 3, 6, 8, 0, tzinfo=UTC)
DUE = START.replace(minute=5)
NEXT_DAY = DUE + timedelta(days=1)
ANSWER = "Backups are fine."
DATA_COMMANDS = [
    "find",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "aggregate",
    "count",
    "getMore",
]


class Model(ScriptedModel):
    """Answers, or is unreachable while ``down``."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.down = False
        self.after_answer: Callable[[], Awaitable[object]] | None = None

    def _answer(self, _request: Request) -> ModelMessage | str | Exception:
        return unavailable() if self.down else ANSWER

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        response = await super().request(system, messages, tools)
        if self.after_answer is not None:
            await self.after_answer()
            self.after_answer = None
        return response


class Alerts:
    """Stands in for the alert router: keeps the warnings raised."""

    def __init__(self) -> None:
        self.raised: list[Doc] = []

    async def raise_alert(self, **fields: Any) -> Doc:
        self.raised.append(fields)
        return fields


class Kit:
    def __init__(
        self, app: App, clock: FakeClock, model: Model, channel: RecordingChannel, name: str
    ) -> None:
        self.app, self.clock, self.model, self.channel = app, clock, model, channel
        self.app_name = name
        alerts = app.deps.alerts
        assert isinstance(alerts, Alerts)  # provided by ``providing`` below
        self.alerts: Alerts = alerts
        self.engine = parts_of(app).engine
        self.job_id = ""

    async def job(self) -> str:
        created = await call_tool(
            self.app,
            "manage_cronjob",
            action="create",
            name="Backups",
            instruction="check the backups",
            cron_expression="5 8 * * *",
            timezone="UTC",
        )
        self.job_id = created["created"]["job_id"]
        return self.job_id

    async def runs(self) -> list[Doc]:
        return await self.app.deps.db["runs"].find({"job_id": self.job_id}).to_list()

    async def next_fire(self) -> datetime | None:
        doc = await self.app.deps.db["cronjobs"].find_one({"_id": self.job_id})
        assert doc is not None
        moment: datetime | None = doc.get("next_fire_at")
        return moment

    def answers(self) -> list[str]:
        return [t for t in self.channel.texts() if t == f"Backups\n{ANSWER}"]

    async def drive_retries(self) -> int:
        """Move the clock to each pending retry and sweep, until none is left."""
        sweeps = 0
        while (at := await parts_of(self.app).runs.next_retry()) is not None:
            assert sweeps < 10, "retries never end"
            self.clock.set(at)
            await self.engine.run_due()
            sweeps += 1
        return sweeps


@contextlib.asynccontextmanager
async def kit(mongo_server: str, tmp_path: Path) -> AsyncIterator[Kit]:
    name = f"watch-{uuid.uuid4().hex[:8]}"
    clock = FakeClock(START)
    model = Model()
    channel = RecordingChannel()
    settings = make_settings(
        # As the embedded database's client connects (no retryable writes), and named,
        # so a failpoint can drop this app's connections and nobody else's.
        mongodb_uri=f"{mongo_server}?directConnection=true&retryWrites=false&appName={name}",
        mongodb_db=f"lost_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        openai_api_key="sk-test",
    )
    async with build_app(
        settings,
        model=model,
        channels=[channel],
        clock=clock,
        features=[
            providing(alerts=Alerts()),
            scheduling(SchedulingOptions(timer=False, grace=timedelta(minutes=10))),
        ],
    ) as app:
        await parts_of(app).pulse.update_config(enabled=False)
        try:
            yield Kit(app, clock, model, channel, name)
        finally:
            await app.database.client.drop_database(settings.mongodb_db)


@contextlib.asynccontextmanager
async def database_down(
    client: AsyncMongoClient[Doc],
    app_name: str,
    mode: str | dict[str, int] = "alwaysOn",
    commands: list[str] = DATA_COMMANDS,
) -> AsyncIterator[None]:
    """Every data command of the app's client has its connection dropped."""
    data = {"failCommands": commands, "closeConnection": True, "appName": app_name}
    await client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})
    try:
        yield
    finally:
        await client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


async def test_a_model_that_recovers_within_the_grace_window_runs_the_fire_once(
    mongo_server: str, tmp_path: Path
) -> None:
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        k.model.down = True
        k.clock.set(DUE + timedelta(seconds=1))
        await k.engine.run_due()
        [run] = await k.runs()
        assert run["status"] == "failed" and run["reason"] == "model_unavailable"
        assert run["retry_at"] <= DUE + timedelta(minutes=10) and not run.get("gave_up")
        assert k.channel.texts() == [
            "⚠️ Backups: the language model could not be reached; I will try again shortly."
        ]
        assert await k.next_fire() == NEXT_DAY  # the schedule moved on; the retry is apart

        k.model.down = False
        assert await k.drive_retries() == 1
        [run] = await k.runs()
        assert run["status"] == "success" and run["attempts"] == 2
        assert "retry_at" not in run and run["scheduled_for"] == DUE
        assert len(k.answers()) == 1
        assert k.alerts.raised == []
        assert await k.next_fire() == NEXT_DAY


async def test_a_model_that_never_recovers_is_recorded_failed_and_the_owner_is_warned(
    mongo_server: str, tmp_path: Path
) -> None:
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        k.model.down = True
        k.clock.set(DUE + timedelta(seconds=1))
        await k.engine.run_due()
        sweeps = await k.drive_retries()
        [run] = await k.runs()
        assert run["status"] == "failed" and run["reason"] == "model_unavailable"
        assert run["gave_up"] is True and run["attempts"] == sweeps + 1 > 2
        assert k.clock() <= DUE + timedelta(minutes=10)  # every try inside the window
        [warning] = k.alerts.raised
        assert warning["severity"] == "warning"
        assert "could not run" in warning["title"] and "Backups" in warning["title"]
        assert warning["dedupe_key"] == f"run-failures:cron:{k.job_id}"
        assert k.channel.texts()[-1] == (
            "⚠️ Backups: this run did not complete — the language model could not be "
            f"reached (tried {sweeps + 1} times)."
        )
        assert k.answers() == []
        assert await k.next_fire() == NEXT_DAY


async def test_a_database_that_recovers_within_the_grace_window_runs_the_fire_once(
    mongo_server: str, mongo_client: AsyncMongoClient[Doc], tmp_path: Path
) -> None:
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        k.clock.set(DUE + timedelta(seconds=1))
        async with database_down(mongo_client, k.app_name):
            with pytest.raises(AutoReconnect):
                await k.engine.run_due()
        assert k.engine.armed.get("retry") is not None  # swept again soon
        k.clock.set(DUE + timedelta(minutes=3))
        await k.engine.run_due()
        [run] = await k.runs()
        assert run["status"] == "success" and run["scheduled_for"] == DUE
        assert len(k.answers()) == 1 and k.alerts.raised == []
        assert await k.next_fire() == NEXT_DAY


async def test_a_run_record_that_cannot_be_opened_is_started_again_within_the_window(
    mongo_server: str, mongo_client: AsyncMongoClient[Doc], tmp_path: Path
) -> None:
    """The failure seen in the issue: the fire was claimed and the job moved on, then the
    run record's insert failed (and its one retry)."""
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        k.clock.set(DUE + timedelta(seconds=1))
        # The cursor's move passes; the run record's write (an upsert by its _id) and its
        # retry fail.
        async with database_down(mongo_client, k.app_name, {"skip": 1, "times": 2}, ["update"]):
            fires = await k.engine.run_due()
        assert [f.action for f in fires] == ["run"]
        assert await k.runs() == [] and await k.next_fire() == NEXT_DAY
        k.clock.set(DUE + timedelta(minutes=1))
        await k.engine.run_due()
        [run] = await k.runs()
        assert run["status"] == "success" and run["scheduled_for"] == DUE
        assert len(k.answers()) == 1 and k.alerts.raised == []
        assert await k.next_fire() == NEXT_DAY


async def test_an_outcome_that_cannot_be_recorded_is_recorded_by_a_later_sweep(
    mongo_server: str, mongo_client: AsyncMongoClient[Doc], tmp_path: Path
) -> None:
    """The work is done and delivered, then closing the record fails: the outcome is
    kept and written once the database is back, not left "running" for ever."""
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        down = database_down(mongo_client, k.app_name, commands=["findAndModify"])
        k.model.after_answer = down.__aenter__  # the record's close is the next findAndModify
        k.clock.set(DUE + timedelta(seconds=1))
        try:
            await k.engine.run_due()
        finally:
            await down.__aexit__(None, None, None)
        [run] = await k.runs()
        assert run["status"] == "running" and len(k.answers()) == 1
        k.clock.set(DUE + timedelta(minutes=1))
        await k.engine.run_due()
        [run] = await k.runs()
        assert run["status"] == "success" and run["result"] == ANSWER
        assert len(k.answers()) == 1 and k.alerts.raised == []


async def test_a_database_that_never_recovers_in_the_window_fails_the_fire_and_warns(
    mongo_server: str, mongo_client: AsyncMongoClient[Doc], tmp_path: Path
) -> None:
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        async with database_down(mongo_client, k.app_name):
            for minute in (0, 4, 9):
                k.clock.set(DUE + timedelta(minutes=minute, seconds=1))
                with pytest.raises(AutoReconnect):
                    await k.engine.run_due()
        k.clock.set(DUE + timedelta(minutes=20))  # back, after the grace window
        fires = await k.engine.run_due()
        assert [f.action for f in fires] == ["failed"]
        [run] = await k.runs()
        assert run["status"] == "failed" and run["reason"] == "database_unavailable"
        assert run["gave_up"] is True and run["scheduled_for"] == DUE
        assert "database could not be reached" in run["error"]
        [warning] = k.alerts.raised
        assert "could not run" in warning["title"]
        assert "The database could not be reached" in warning["body"]
        assert k.answers() == []
        assert await k.next_fire() == NEXT_DAY


async def test_a_fire_missed_while_the_process_was_away_is_recorded_missed_and_alerted(
    mongo_server: str, tmp_path: Path
) -> None:
    """Downtime of the process itself is no failure of the job, but it is not silent
    either (issue 30, item 5): the fire is recorded missed and the owner is alerted once."""
    async with kit(mongo_server, tmp_path) as k:
        await k.job()
        k.clock.set(DUE + timedelta(minutes=20))
        fires = await k.engine.run_due()
        assert [f.action for f in fires] == ["missed"]
        [run] = await k.runs()
        assert run["status"] == "skipped" and run["reason"] == "missed"
        assert "alert_pending" not in run and run["name"] == "Backups"
        [alert] = k.alerts.raised
        assert alert["title"] == "Cron job “Backups” missed 1 scheduled run"
        assert "Backups”: Fri 06 Mar 08:05" in alert["body"]
        assert alert["severity"] == "warning" and alert["source"] == "scheduler"
        assert await k.next_fire() == NEXT_DAY


async def test_a_pulse_is_retried_too_and_counted_once(mongo_server: str, tmp_path: Path) -> None:
    async with kit(mongo_server, tmp_path) as k:
        pulse = parts_of(k.app).pulse
        await pulse.owner.update(quiet_hours=[])
        await pulse.update_config(enabled=True, pulses_per_day=48)
        await pulse.update_notes("the invoice is due today")  # something to look at
        due = (await pulse.get()).next_pulse_at
        assert due is not None
        k.model.down = True
        k.clock.set(due)
        await k.engine.run_due()
        [run] = await k.app.deps.db["runs"].find({"kind": "pulse"}).to_list()
        assert run["status"] == "failed" and run["reason"] == "model_unavailable"
        assert (await pulse.get()).done_today == 0  # a try to be repeated is not counted
        k.model.down = False
        assert await k.drive_retries() == 1
        [run] = await k.app.deps.db["runs"].find({"kind": "pulse"}).to_list()
        assert run["status"] == "success" and run["attempts"] == 2
        state = await pulse.get()
        assert state.done_today == 1 and state.next_pulse_at == due + timedelta(minutes=30)


async def test_the_engine_wakes_itself_for_a_retry(db: AsyncDatabase[Doc]) -> None:
    """With real timers nobody has to sweep: the retry timer does, at ``retry_at``."""

    clock = partial(datetime.now, UTC)
    tries: list[int] = []
    finished = asyncio.Event()

    async def work(job: CronJob, ticket: RunTicket) -> Outcome:
        tries.append(ticket.attempt)
        if ticket.attempt == 1:
            return Outcome("failed", error="model unavailable", reason="model_unavailable")
        finished.set()
        return Outcome("success", result="done")

    async def no_pulse(now: datetime, trigger: Trigger) -> Skip:
        return Skip("idle", "off")

    runs = RunStore(db)
    jobs = CronService(CronJobStore(db, JobReader()), clock, "UTC")
    pulse = PulseStore(PulseRepo(db), clock, OwnerSettings(db, clock, "UTC"))
    await pulse.update_config(enabled=False)
    recorder = RunRecorder(
        runs, clock, cron=work, pulse=no_pulse, backoff=Backoff(first=0.3, cap=0.3, retries=1)
    )
    engine = Engine(
        jobs=jobs,
        pulse=pulse,
        runs=runs,
        leases=LeaseStore(db, owner="a"),
        clock=clock,
        recorder=recorder,
    )
    job = await jobs.create(name="job", instruction="do it", cron_expression="* * * * *")
    await engine.start()
    try:
        due = clock() - timedelta(seconds=1)  # due now in real time, as the retry timer counts
        await db["cronjobs"].update_one({"_id": job.id}, {"$set": {"next_fire_at": due}})
        await engine.run_due(clock())
        assert tries == [1]
        await asyncio.wait_for(finished.wait(), 5)
        await engine.join()
    finally:
        await engine.stop()
    [run] = await db["runs"].find({"job_id": job.id}).to_list()
    assert tries == [1, 2] and run["status"] == "success" and run["attempts"] == 2
