"""Jobs: ``GET /jobs`` lists every cron and one-time job with its next fires;
``POST /jobs/<id>/pause``, ``/resume`` and ``/delete`` change one.

The actions go through ``CronService`` (``toggle`` and ``delete``), the same calls
the ``manage_cronjob`` tool makes, so a job is validated, re-armed and heard by the
engine the same way; the change is recorded with ``by="dashboard"`` (``updated_by``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from agent.app.dashboard import BY
from agent.app.dashboard.context import Dashboard
from scheduler.cron.job import CronJob, JobError
from scheduler.cron.service import CronService
from scheduler.views import job_view, upcoming

Doc = dict[str, Any]
LISTED = 200


def job_row(job: CronJob, now: datetime) -> Doc:
    view = job_view(job, now)
    if job.done:
        state, badge = f"done ({job.last_status or '?'})", "muted"
    elif not job.enabled:
        state, badge = "paused", "warn"
    else:
        state, badge = view.get("state", "active"), "ok"
    return {
        **view,
        "state": state,
        "badge": badge,
        "done": job.done,
        "updated_by": job.updated_by,
        "next_fires": upcoming(job, now, 3) if job.enabled else [],
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
        rows = [job_row(job, now) for job in listed]
        return dash.render(request, "jobs.html", {"running": True, "jobs": rows, "total": total})

    async def change(request: web.Request, action: str) -> web.StreamResponse:
        jobs = service()
        if jobs is None:
            return dash.done(request, "/jobs", "The scheduler is not running; nothing changed.")
        job_id = request.match_info["job_id"]
        try:
            if action == "delete":
                job = await jobs.delete(job_id, by=BY)
                text = f"Deleted “{job.name}” ({job.id})."
            else:
                job = await jobs.toggle(job_id, action == "resume", by=BY)
                text = f"{'Resumed' if job.enabled else 'Paused'} “{job.name}” ({job.id})."
                fires = job.next_fires(dash.now(), 1)
                if job.enabled and fires:
                    text += f" Next fire {fires[0].isoformat(timespec='minutes')}."
        except JobError as exc:
            text = f"Nothing changed: {exc}"
        return dash.done(request, "/jobs", text)

    async def pause(request: web.Request) -> web.StreamResponse:
        return await change(request, "pause")

    async def resume(request: web.Request) -> web.StreamResponse:
        return await change(request, "resume")

    async def delete(request: web.Request) -> web.StreamResponse:
        return await change(request, "delete")

    dash.get(router, "/jobs", jobs_page)
    dash.post(router, "/jobs/{job_id}/pause", pause)
    dash.post(router, "/jobs/{job_id}/resume", resume)
    dash.post(router, "/jobs/{job_id}/delete", delete)
