"""Cron jobs and fire claims are read and written by their stores under
``storage/repos`` (``cron_jobs``, ``leases``) as typed values: the scheduler above them
never builds a query or indexes a stored document (issue 37, "typed records"). A job
damaged by hand is refused by name where it is asked for, and skipped (logged) where
jobs are listed or swept, so the others keep running."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from scheduler.cron.job import CronJob, JobError, JobReader
from scheduler.cron.service import CronService
from storage.repos.cron_jobs import CronJobStore
from tests.fakes.clock import FakeClock

Doc = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
TYPED = (
    "scheduler/cron/service.py",
    "scheduler/cron/job.py",
    "scheduler/fires/claims.py",
    "scheduler/fires/retries.py",
    "scheduler/fires/recorder.py",
    "scheduler/engine.py",
)
"""Modules that work with typed records only."""
DRIVER = ("pymongo", "bson")


def _touches_documents(source: str) -> list[str]:
    """Where ``source`` imports the driver or ``Doc``, or defines a ``Doc`` of its own."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in DRIVER]  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in DRIVER:
                found.append(f"{node.lineno}: from {node.module}")
            found += [f"{node.lineno}: Doc from {node.module}"
                      for a in node.names if a.name == "Doc"]  # fmt: skip
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "Doc" for t in node.targets
        ):
            found.append(f"{node.lineno}: Doc =")
    return found


def test_the_scheduler_above_the_stores_never_touches_a_stored_document() -> None:
    crossings = {
        module: found
        for module in TYPED
        if (found := _touches_documents((ROOT / module).read_text(encoding="utf-8")))
    }
    assert crossings == {}


def test_the_check_sees_each_kind_of_crossing() -> None:
    source = (
        "import bson\nfrom pymongo import UpdateOne\nfrom storage.records import Doc\nDoc = 1\n"
    )
    assert _touches_documents(source) == [
        "1: import bson",
        "2: from pymongo",
        "3: Doc from storage.records",
        "4: Doc =",
    ]


async def test_a_job_damaged_by_hand_is_refused_by_name_and_skipped_in_lists(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    jobs = CronService(CronJobStore(db, JobReader()), clock, "UTC")
    good = await jobs.create(name="Backups", instruction="check", cron_expression="0 9 * * *")
    bad = await jobs.create(name="Report", instruction="write", cron_expression="0 9 * * *")
    await db["cronjobs"].update_one({"_id": bad.id}, {"$set": {"name": 42}})
    with pytest.raises(JobError, match=f"cron job '{bad.id}' is stored in a form that cannot"):
        await jobs.get(bad.id)
    with pytest.raises(JobError, match="cannot be read"):
        await jobs.update(bad.id, name="Weekly report")
    assert [job.id for job in await jobs.list_jobs()] == [good.id]
    due = await jobs.store.enabled(due_by=datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    assert [job.id for job in due] == [good.id]
    assert isinstance(due[0], CronJob) and due[0].schedule is not None  # ready to fire


async def test_a_job_reads_back_as_it_was_written(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    jobs = CronService(CronJobStore(db, JobReader()), clock, "UTC")
    created = await jobs.create(
        name="Call mum", instruction="remind me", in_minutes=90, on_failure="critical"
    )
    assert created == await jobs.get(created.id)
    changed = await jobs.update(created.id, cron_expression="0 9 * * 1", timezone="Europe/Berlin")
    assert changed == await jobs.get(created.id)
    assert (changed.kind, changed.run_at, changed.cron_expression) == (
        "recurring",
        None,
        "0 9 * * 1",
    )
    assert changed.on_failure == "critical" and changed.timezone == "Europe/Berlin"
