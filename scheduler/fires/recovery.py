"""Work a process left unfinished, found and finished: runs left ``running`` by a
process that is gone (``Reclaimer``), and one-time jobs whose only fire was claimed but
whose job is not yet done (``recover_once``). Both run at every (re)load.

A ``running`` record is orphaned when no live process holds it
(``scheduler.fires.leases``):

* its lease has lapsed: its holder stopped renewing it (it died, or stopped and let it
  lapse); a run this process holds is never taken; or
* this process started the only server of its database (the embedded one: one process
  owns ``DATA_DIR``), and the run began, in another process, before this one started:
  its process is gone, whatever its lease says, so it is reclaimed at once.

Each orphan is closed ``failed`` (``interrupted``) in one compare-and-set, so one
process handles it, and in the same write either tried again now (once per record;
a one-time job gets a grace window from now, a recurring job or the pulse keeps its
fire's) or given up: the owner hears of it as the job's ``on_failure`` says, and a
one-time job is kept as done. A try again keeps the run id, so acting tool calls and
an answer already delivered are not repeated. Records of a job disabled or deleted are
closed quietly. Nothing stays ``running`` for ever, and nothing ends silently.

``orphaned`` is the pure part; ``Reclaimer.scan`` runs at every (re)load and again when
the next lease of another process lapses (``next_check``), so a restart after a crash
is noticed within one lease.

The engine moves a job's cursor before the run starts, so a one-time job has no next
fire while it runs. ``recover_once`` (called on every load: start-up and each resync)
finds those jobs and finishes what a crash or a lost write left behind:

* the run is over (no try left): the job is kept as done, with the run's status;
* the run was interrupted (the process stopped mid-run) and its record closed without
  a decision (``Reclaimer`` decides in the same write; this covers records closed by
  earlier versions): it is tried once more, as a retry due now (the same run id, so
  acting tool calls already made are not repeated); interrupted a second time, it is
  given up and the owner is told;
* no run was recorded and the claim is older than the grace window (the process
  stopped between claiming and recording): the claim is released and the fire put
  back, so it runs, late, rather than never;
* a run in flight or a retry pending: left alone (a run whose process died is
  reclaimed first, by ``Reclaimer``).

It also prunes one-time jobs done more than 30 days ago.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bson import ObjectId

from scheduler.cron.job import CronJob, JobError
from scheduler.cron.service import CronService
from scheduler.fires.claims import cron_key
from scheduler.fires.recorder import RunRecorder
from storage.repos.leases import LeaseStore
from storage.repos.runs.record import Run
from storage.repos.runs.store import RunStore

log = logging.getLogger(__name__)
UNLEASED_HOLD = timedelta(minutes=5)
"""A record written before runs had leases is taken as held this long after its try
began (the longest default run time, 180 s, and a margin)."""


@dataclass(frozen=True)
class Orphans:
    runs: list[Run]
    next_lapse: datetime | None
    """When the earliest lease of another process still running lapses, if any."""


def orphaned(
    records: Iterable[Run],
    now: datetime,
    *,
    held: Collection[ObjectId] = (),
    sole_since: datetime | None = None,
) -> Orphans:
    """The ``running`` records no live process holds; ``held``: the ids of those this
    process holds; ``sole_since``: this process started the database's only server then."""
    found: list[Run] = []
    lapse: datetime | None = None
    for run in records:
        if run.id in held:
            continue  # in flight here, or its outcome waits for the database
        start, until = run.began, run.lease_until
        if until is None and start is not None:
            until = start + UNLEASED_HOLD
        cut_off = sole_since is not None and (start is None or start < sole_since)
        if cut_off or until is None or until <= now:
            found.append(run)
        elif lapse is None or until < lapse:
            lapse = until
    return Orphans(found, lapse)


class Reclaimer:
    def __init__(
        self,
        runs: RunStore,
        jobs: CronService,
        recorder: RunRecorder,
        grace: timedelta,
        *,
        sole_owner: bool = False,
    ) -> None:
        self.runs = runs
        self.jobs = jobs
        self.recorder = recorder
        self.grace = grace
        self._sole_since = recorder.leases.started_at if sole_owner else None
        """Only for the first scan: later records of other processes are theirs (a
        command attached to this process's database), lease or not."""
        self.next_check: datetime | None = None
        """When the next scan may find an orphan (another process's lease lapses)."""

    async def scan(self, now: datetime) -> list[Run]:
        """Reclaim every orphan now; returns the records closed by this call."""
        records = await self.runs.running()
        held = self.recorder.leases.held  # after the read: a run it shows is held by now
        found = orphaned(records, now, held=held, sole_since=self._sole_since)
        self._sole_since = None
        self.next_check = found.next_lapse
        closed: list[Run] = []
        for run in found.runs:
            try:
                done = await self._reclaim(run, now)
            except Exception:  # still running and lapsed: the next scan finds it again
                log.exception("run %s not reclaimed now", run.id)
                continue
            if done is not None:
                closed.append(done)
        return closed

    async def _reclaim(self, record: Run, now: datetime) -> Run | None:
        job = await self._job(record)
        until: datetime | None = None
        note = "interrupted twice: the process stopped during the run"
        if record.kind == "cron" and job is None:
            note = "not retried: the job was disabled or deleted"
        elif not record.resumed:
            until = now + self.grace if job is not None and job.once else None
            until = until or record.retry_until
            if until is None or now > until:
                note, until = "interrupted, and its grace window has ended", None
        owner = self.recorder.leases.owner
        done = await self.runs.reclaim(record, now, owner, retry_until=until, note=note)
        if done is None:
            return None  # renewed meanwhile, or another process took it
        what = f"{record.kind} run {record.id}" + (f" of job {job.id}" if job else "")
        if until is not None:
            log.warning("%s was interrupted (held by %s); trying it again", what, record.owner)
            return done
        log.warning("%s was interrupted (held by %s); %s", what, record.owner, note)
        if job is not None or record.kind == "pulse":
            await self.recorder.reclaimed(done, job)
        if job is not None and job.once:
            await self.jobs.finish_once(job.id, done.scheduled_for or now, done.status, now)
        return done

    async def _job(self, record: Run) -> CronJob | None:
        if record.kind != "cron":
            return None
        try:
            job = await self.jobs.get(record.job_id)
        except JobError:
            return None
        return job if job.enabled else None


# --- one-time jobs whose fire was claimed ---------------------------------------------


async def recover_once(
    jobs: CronService,
    recorder: RunRecorder,
    leases: LeaseStore,
    now: datetime,
    grace: timedelta,
) -> None:
    await jobs.store.prune_done(now)
    for job in await jobs.store.stranded_once():
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
    if last is None or last.scheduled_for != run_at:
        if await leases.release_stale(cron_key(job.id, run_at), before=now - grace):
            log.warning("one-time job %s was claimed but never ran; it runs now", job.id)
            await jobs.restore_once(job.id, run_at)
        return
    if last.status == "running" or last.retry_at is not None:
        return
    status: str = last.status
    if last.reason == "interrupted" and not last.gave_up:
        if not last.resumed:
            if await recorder.runs.resume(last, now, now + grace):
                log.warning("one-time job %s was interrupted; trying it again", job.id)
            return
        note = "interrupted twice: the process stopped during the run"
        status = (await recorder.give_up(last, job, note, tell=True)).status
    await jobs.finish_once(job.id, run_at, status, now)
