"""``manage_cronjob``: recurring tasks and one-time reminders the model sets up.

The tool is a thin shell over ``CronService`` (``AgentDeps.cron``),
which validates and stores; ``cronjobs`` is written nowhere else. A new job remembers
the chat it was created in, and its results are delivered there; an empty answer is
not delivered at all (``agent.runs.runner``), so a check can stay silent when all is
well. A schedule with both day fields set is kept, with cron's OR rule said plainly
in the answer (``scheduler.cron.expression.day_rule_warning``). An instruction written
by a run that had read outside text (on the owner's approval) keeps that text as its
source (``agent.tools.held.provenance``), and the job's runs count as having read it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from agent.tools.held import provenance
from scheduler.cron.expression import day_rule_warning
from scheduler.cron.job import CronJob, JobError
from scheduler.cron.service import CronService
from scheduler.views import OwnerZone, job_view

LIST_LIMIT = 50


class CronArgs(BaseModel):
    action: Literal["create", "list", "update", "delete", "toggle"]
    job_id: str | None = None
    name: str | None = None
    instruction: str | None = None
    cron_expression: str | None = Field(default=None, description="5 fields or @daily")
    run_at: str | None = Field(default=None, description="ISO 2026-05-01T08:00")
    in_minutes: int | None = None
    timezone: str | None = Field(
        default=None, description="IANA; omitted: follows the owner's zone, also when it changes"
    )
    enabled: bool | None = None
    on_failure: Literal["warning", "critical", "none"] | None = Field(
        default=None,
        description="warning (default): alert after 2 failures in a row (one-time: 1); "
        "critical: at the first",
    )


def _with_warning(answer: ToolResult, job: CronJob) -> ToolResult:
    """Add cron's OR rule, in words, when the job's day fields are both restricted."""
    warning = day_rule_warning(job.cron_expression) if job.cron_expression else None
    if warning is not None:
        answer["warning"] = warning
    return answer


def owner_zone(ctx: RunContext) -> OwnerZone:
    """The owner's zone and any change set for later, for the job views."""
    prefs = ctx.deps.owner.current
    pending = prefs.pending_zone
    return OwnerZone(prefs.timezone, (pending.timezone, pending.at) if pending else None)


def cron_service(ctx: RunContext) -> CronService:
    service = ctx.deps.cron
    if service is None:
        raise ToolError("the scheduler is not running, so cron jobs are unavailable")
    return service


async def _manage(args: CronArgs, ctx: RunContext) -> ToolResult:
    service = cron_service(ctx)
    now, owner = ctx.now, owner_zone(ctx)
    try:
        if args.action == "list":
            jobs = await service.list_jobs(limit=LIST_LIMIT)
            total = await service.count() if len(jobs) == LIST_LIMIT else len(jobs)
            shown = [job_view(job, now, ctx.tz, owner) for job in jobs]  # the owner's clock
            listed: ToolResult = {"jobs": shown, "count": total}
            if total > len(jobs):
                listed["note"] = f"only the oldest {LIST_LIMIT} are listed"
            return listed
        if args.action == "create":
            job = await service.create(
                name=args.name,
                instruction=args.instruction,
                cron_expression=args.cron_expression,
                run_at=args.run_at,
                in_minutes=args.in_minutes,
                timezone=args.timezone or ctx.tz.key,
                enabled=True if args.enabled is None else args.enabled,
                on_failure=args.on_failure,
                origin_channel=ctx.channel,
                origin_chat_id=ctx.chat_id,
                source=provenance(ctx),
            )
            return _with_warning({"created": job_view(job, now, owner=owner)}, job)
        if args.action == "update":
            job = await service.update(
                args.job_id,
                name=args.name,
                instruction=args.instruction,
                cron_expression=args.cron_expression,
                run_at=args.run_at,
                in_minutes=args.in_minutes,
                timezone=args.timezone,
                enabled=args.enabled,
                on_failure=args.on_failure,
                source=provenance(ctx),
            )
            updated: ToolResult = {"updated": job_view(job, now, owner=owner)}
            return _with_warning(updated, job) if args.cron_expression else updated
        if args.action == "toggle":
            job = await service.toggle(args.job_id, args.enabled)
            return {"updated": job_view(job, now, owner=owner)}
        job = await service.delete(args.job_id)
        return {"deleted": job.id, "name": job.name}
    except JobError as exc:
        raise ToolError(str(exc)) from None


MANAGE_CRONJOB: Tool[Any] = Tool(
    name="manage_cronjob",
    description=(
        "Jobs run 'instruction' (a task for you) with no user present; the answer goes "
        "to this chat; an empty answer sends nothing. create: name, instruction, one of "
        "cron_expression (repeats), run_at or in_minutes (runs once); "
        "optional timezone, on_failure. update: job_id + fields to change. delete: job_id. "
        "toggle: job_id; enabled sets it, omitted flips it. Results: zone, next fires."
    ),
    args=CronArgs,
    handler=_manage,
    acting=lambda args: args.action != "list",
)
