"""Jobs: ``GET /jobs`` lists every cron and one-time job with its next fires;
``POST /jobs/<id>/pause``, ``/resume`` and ``/delete`` change one (a delete only with
``confirm=yes``, which the second step of the page's Delete sends); ``POST
/jobs/<id>/run`` runs a recurring one now.

The actions go through ``CronService`` (``toggle`` and ``delete``), the same calls
the ``manage_cronjob`` tool makes, so a job is validated, re-armed and heard by the
engine the same way; the change is recorded with ``by="dashboard"`` (``updated_by``).
"Run now" starts the run in the background through the engine (``Engine.start_now``:
recorded like a scheduled fire with trigger ``manual``, answer delivered to the job's
chat) and answers at once; while a run of the job is under way, in any process, a
second click is refused and starts nothing.

Times are words in the owner's timezone (``human_time``); where an answer goes is said
by name ("Telegram, you").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from agent.app.dashboard import BY
from agent.app.dashboard.context import Dashboard, channel_name, human_time
from agent.reach import Reach
from scheduler.cron.expression import CronError
from scheduler.cron.job import CronJob, JobError
from scheduler.cron.service import CronService
from scheduler.engine import AlreadyRunning
from scheduler.views import OwnerZone, job_state, job_view, schedule_words

LISTED = 200


ON_FAILURE = {
    "warning": "a warning after two failures in a row",
    "critical": "a critical alert at the first failure (pages by SMS)",
    "none": "no alert",
}


def destination(reach: Reach, channel: str, chat_id: str) -> str:
    """Where a job's answer goes, by name: ``Telegram, you`` or ``WhatsApp, chat 4917…``."""
    if reach.is_owner(channel, chat_id, {}) or chat_id == reach.address(channel):
        return f"{channel_name(channel)}, you"
    return f"{channel_name(channel)}, chat {chat_id}"


def job_row(job: CronJob, now: datetime, dash: Dashboard) -> dict[str, Any]:
    """A job as the page shows it: a recurring one says whether it follows the owner's
    timezone; its next fires count in a zone change set for later."""
    prefs = dash.app.deps.owner.current
    pending = prefs.pending_zone
    owner = OwnerZone(prefs.timezone, (pending.timezone, pending.at) if pending else None)
    view = job_view(job, now, dash.tz)

    def shown(at: datetime | None) -> str:
        return human_time(at, dash.tz, now)

    if job.done:
        state, badge = f"done ({job.last_status or '?'})", "muted"
    elif not job.enabled:
        state, badge = "paused", "warn"
    else:
        state, badge = job_state(job, now) or "active", "ok"
    if job.once:
        schedule = f"once, {shown(job.run_at)}" + (", then kept as done" if not job.done else "")
    else:
        follows = "follows your timezone" if owner.follows(job) else "keeps its own"
        schedule = f"{schedule_words(job, dash.tz)}, {follows}"
    try:
        fires = owner.fires(job, now, 3) if job.enabled and not job.done else []
    except CronError:
        fires = []
    return {
        **view,
        "schedule": schedule,
        "state": state,
        "badge": badge,
        "done": job.done,
        "done_at": shown(job.done_at) if job.done else None,
        "updated_by": job.updated_by,
        "next_fires": [shown(at) for at in fires],
        "delivers_to": destination(dash.app.deps.reach, job.origin_channel, job.origin_chat_id),
        "on_failure": ON_FAILURE.get(job.on_failure, job.on_failure),
        "can_run": not job.once and not job.done,
    }


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    def service() -> CronService | None:
        return dash.app.deps.cron

    async def jobs_page(request: web.Request) -> web.StreamResponse:
        jobs = service()
        if jobs is None:
            return dash.render(request, "jobs.html", {"running": False, "jobs": []})
        now = dash.now()
        listed = await jobs.list_jobs(limit=LISTED)
        total = await jobs.count() if len(listed) == LISTED else len(listed)
        rows = [job_row(job, now, dash) for job in listed]
        return dash.render(request, "jobs.html", {"running": True, "jobs": rows, "total": total})

    async def change(request: web.Request, action: str) -> web.StreamResponse:
        jobs = service()
        if jobs is None:
            return dash.done(request, "/jobs", "The scheduler is not running; nothing changed.")
        job_id = request.match_info["job_id"]
        if action == "delete" and (await request.post()).get("confirm") != "yes":
            return dash.done(request, "/jobs", "Nothing deleted: confirm with “Delete for good”.")
        try:
            if action == "delete":
                job = await jobs.delete(job_id, by=BY)
                text = f"Deleted “{job.name}” ({job.id})."
            else:
                job = await jobs.toggle(job_id, action == "resume", by=BY)
                text = f"{'Resumed' if job.enabled else 'Paused'} “{job.name}” ({job.id})."
                fires = job.next_fires(dash.now(), 1)
                if job.enabled and fires:
                    text += f" Next fire {human_time(fires[0], dash.tz, dash.now())}."
        except JobError as exc:
            text = f"Nothing changed: {exc}"
        return dash.done(request, "/jobs", text)

    async def pause(request: web.Request) -> web.StreamResponse:
        return await change(request, "pause")

    async def resume(request: web.Request) -> web.StreamResponse:
        return await change(request, "resume")

    async def delete(request: web.Request) -> web.StreamResponse:
        return await change(request, "delete")

    async def run_now(request: web.Request) -> web.StreamResponse:
        scheduling = dash.app.scheduling
        if scheduling is None:
            return dash.done(request, "/jobs", "The scheduler is not running; nothing ran.")
        try:
            job = await scheduling.jobs.get(request.match_info["job_id"])
        except JobError as exc:
            return dash.done(request, "/jobs", f"Nothing ran: {exc}")
        if job.once or job.done:
            return dash.done(request, "/jobs", f"“{job.name}” runs once, at its time; not run now.")
        try:
            await scheduling.engine.start_now(job)
        except AlreadyRunning as busy:
            since = f" (since {human_time(busy.since, dash.tz, dash.now())})" if busy.since else ""
            text = f"“{job.name}” is already running{since}; not started again."
            return dash.done(request, "/jobs", text)
        where = destination(dash.app.deps.reach, job.origin_channel, job.origin_chat_id)
        text = f"Started “{job.name}”; its answer goes to {where}. See Runs for how it went."
        return dash.done(request, "/jobs", text)

    dash.get(router, "/jobs", jobs_page)
    dash.post(router, "/jobs/{job_id}/pause", pause)
    dash.post(router, "/jobs/{job_id}/resume", resume)
    dash.post(router, "/jobs/{job_id}/delete", delete)
    dash.post(router, "/jobs/{job_id}/run", run_now)
