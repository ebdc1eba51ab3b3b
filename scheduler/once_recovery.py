"""One-time jobs whose only fire was claimed but whose job is not yet done.

The engine moves a job's cursor before the run starts, so a one-time job has no next
fire while it runs. ``recover_once`` (called on every load: start-up and each resync)
finds those jobs and finishes what a crash or a lost write left behind:

* the run is over (no try left): the job is kept as done, with the run's status;
* the run was interrupted (the process stopped mid-run) and its record closed without
  a decision (``scheduler.reclaim`` decides in the same write; this covers records
  closed by earlier versions): it is tried once more, as a retry due now (the same run
  id, so acting tool calls already made are not repeated); interrupted a second time,
  it is given up and the owner is told;
* no run was recorded and the claim is older than the grace window (the process
  stopped between claiming and recording): the claim is released and the fire put
  back, so it runs, late, rather than never;
* a run in flight or a retry pending: left alone (a run whose process died is
  reclaimed first, ``scheduler.reclaim``).

It also prunes one-time jobs done more than 30 days ago.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from scheduler.leases import LeaseStore, cron_key
from scheduler.recorder import RunRecorder
from storage.ejson import aware

log = logging.getLogger(__name__)
Doc = dict[str, Any]


async def recover_once(
    jobs: CronService,
    recorder: RunRecorder,
    leases: LeaseStore,
    now: datetime,
    grace: timedelta,
) -> None:
    await jobs.prune_done(now)
    for job in await jobs.stranded_once():
        try:
            await _recover(job, jobs, recorder, leases, now, grace)
        except Exception:
            log.exception("one-time job %s not recovered now; tried again on resync", job.id)


async def _recover(
    job: CronJob,
    jobs: CronService,
    recorder: RunRecorder,
    leases: LeaseStore,
    now: datetime,
    grace: timedelta,
) -> None:
    run_at = job.run_at
    if run_at is None:
        return
    latest = await recorder.runs.recent("cron", job.id, limit=1)
    last = latest[0] if latest else None
    if last is None or aware(last["scheduled_for"]) != run_at:
        if await leases.release_stale(cron_key(job.id, run_at), before=now - grace):
            log.warning("one-time job %s was claimed but never ran; it runs now", job.id)
            await jobs.restore_once(job.id, run_at)
        return
    if last.get("status") == "running" or last.get("retry_at"):
        return
    if last.get("reason") == "interrupted" and not last.get("gave_up"):
        if not last.get("resumed"):
            if await recorder.runs.resume(last, now, now + grace):
                log.warning("one-time job %s was interrupted; trying it again", job.id)
            return
        note = "interrupted twice: the process stopped during the run"
        last = await recorder.give_up(last, job, note, tell=True)
    await jobs.finish_once(job.id, run_at, str(last.get("status")), now)
