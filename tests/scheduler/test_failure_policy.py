"""``on_failure`` per job, through the real alert router and a fake Twilio: ``warning``
after two failures in a row, ``critical`` pages by SMS at the first, ``none`` is quiet;
a one-time job's only failure counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent.app.features.scheduling import SchedulingOptions, scheduling
from scheduler.cron.job import CronJob
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import parts_of


def _looping_model() -> ScriptedModel:
    """Never gives an answer: every run ends ``out_of_steps`` (a failure not retried)."""
    model = ScriptedModel(lambda r: "")
    model.responder = lambda r: model.call("manage_cronjob", action="list")
    return model


async def _fire(h: Harness, job: CronJob) -> None:
    moment = job.next_fires(h.clock(), 1)[0]
    h.clock.set(moment + timedelta(seconds=2))
    await parts_of(h.app).engine.run_due()


async def _alerts(h: Harness) -> list[dict[str, Any]]:
    return await h.app.deps.db["alerts"].find({}).to_list()


async def _job(h: Harness, **fields: Any) -> CronJob:
    return await parts_of(h.app).jobs.create(
        name="Backup check", instruction="check the backups", **fields
    )


@pytest.mark.parametrize(
    ("policy", "after_one", "after_two"),
    [
        (None, [], ["warning"]),
        ("warning", [], ["warning"]),
        ("critical", ["critical"], ["critical"]),
        ("none", [], []),
    ],
)
async def test_recurring_failure_policy(
    app_db: AppDb, policy: str | None, after_one: list[str], after_two: list[str]
) -> None:
    feature = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, model=_looping_model(), features=(feature,)) as h:
        job = await _job(h, cron_expression="0 * * * *", on_failure=policy)
        await _fire(h, job)
        first = [a["severity"] for a in await _alerts(h)]
        sms_after_first = len(h.sms)
        await _fire(h, await parts_of(h.app).jobs.get(job.id))
        second = await _alerts(h)
        runs = await h.app.deps.db["runs"].find({"kind": "cron"}).to_list()
    assert [r["reason"] for r in runs] == ["out_of_steps", "out_of_steps"]
    assert first == after_one
    assert [a["severity"] for a in second] == after_two  # deduplicated while open
    if policy == "critical":
        assert sms_after_first == 1  # paged at the first failure
        assert second[0]["source"] == f"cron:{job.id}" and second[0]["count"] >= 1
    if after_two:
        assert "Backup check" in second[0]["title"]


async def test_a_one_time_job_failure_is_raised_at_once(app_db: AppDb) -> None:
    feature = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, model=_looping_model(), features=(feature,)) as h:
        job = await _job(h, in_minutes=5)
        await _fire(h, job)
        alerts = await _alerts(h)
        done = await parts_of(h.app).jobs.get(job.id)
    assert [a["severity"] for a in alerts] == ["warning"]
    assert alerts[0]["title"] == "One-time job “Backup check” failed"
    assert done.done and done.last_status == "failed" and not done.enabled
