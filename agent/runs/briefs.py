"""What a run is told: a cron run's message about itself, and a pulse's light brief.

A cron run's message carries its job id and whether the job is one-time, so the model
can refer to the job (``manage_cronjob``) and knows a one-time run will not come
again. A one-time fire that runs late (missed while Watchkeeper was down) says so, and
so does the head line of what it delivers.

A pulse gets a brief instead of chat history: only the notes, open alerts, cron jobs
due before the next pulse and what happened since the last one: contacts' messages
and cron runs (the owner's own chat with the agent was answered as it came, so it is
no news). When all of that is
empty the pulse is idle and no model call is made at all: a heartbeat with nothing to
look at must cost nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from agent.alerts.policy import model_field
from agent.context import AgentDeps
from agent.reach import Reach
from scheduler.cron.job import CronJob, local_text
from scheduler.cron.service import CronService
from scheduler.fires.recorder import RunTicket
from scheduler.pulse.grid import PulseConfigError, next_pulse, remaining_today
from scheduler.pulse.store import PulseState
from scheduler.views import short_time
from storage.repos.alert_record import Alert
from storage.repos.inbox import STATUSES, Arrival, arrivals_since
from storage.repos.runs.record import Run
from storage.repos.runs.store import RunStore

log = logging.getLogger(__name__)
LATE = timedelta(minutes=10)
"""A fire that starts this long after its time is called late."""


def is_late(ticket: RunTicket, now: datetime) -> bool:
    return now - ticket.scheduled_for > LATE


def cron_prompt(job: CronJob, ticket: RunTicket, now: datetime) -> str:
    """The run's message: who it is, then the task."""
    tz = ZoneInfo(job.timezone)
    if job.once:
        due = local_text(ticket.scheduled_for, tz)
        what = f"one-time (set for {due}; this is its only run)"
    else:
        what = f"recurring ({job.rule_words()}, {job.timezone})"
    head = f"Scheduled job {job.id} “{job.name}”, {what}."
    if is_late(ticket, now):
        head += (
            f" It runs late: it was due at {local_text(ticket.scheduled_for, tz)} and "
            "Watchkeeper could not run it then; say so in your answer."
        )
    return f"{head}\nTask: {job.instruction}"


def delivery_head(job: CronJob, ticket: RunTicket, now: datetime) -> str:
    """The first line of a delivered result: the job's name, and lateness if any."""
    if not is_late(ticket, now):
        return job.name
    due = ticket.scheduled_for.astimezone(ZoneInfo(job.timezone))
    return f"{job.name} (late: due {due:%a %H:%M})"


@dataclass
class PulseBrief:
    text: str
    idle: bool
    since: datetime
    counts: dict[str, int] = field(default_factory=dict)


async def open_alerts(deps: AgentDeps) -> list[Alert]:
    """Open alerts when the alert router runs; else none. A failing read costs the
    pulse its alert section, never the pulse itself. A test page is not news: it never
    wakes the model (``agent.alerts.page_test``)."""
    if deps.alerts is None:
        return []
    try:
        return [alert for alert in await deps.alerts.open_alerts() if not alert.test]
    except Exception:
        log.exception("could not read open alerts for the pulse")
        return []


def _is_new(alert: Alert, since: datetime) -> bool:
    stamps = [at for at in (alert.created_at, alert.updated_at, alert.last_seen_at) if at]
    return max(stamps) > since


def _clip(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def is_news(message: Arrival) -> bool:
    """Whether a stored inbound message is news for a pulse: what the owner or a contact
    wrote. Not a stranger's (emptied, flagged), not a slash command (``/pulse``), not a
    button press on one of our own messages, not a message that could not be stored
    (``failed``: not read at all). The bot's own messages never reach the inbox
    (WhatsApp echoes are dropped by the channel)."""
    if message.stranger or message.meta.get("kind") == "button":
        return False
    return not message.text.lstrip().startswith("/")


def from_owner(message: Arrival, reach: Reach) -> bool:
    """Whether a stored inbound message is the owner's (by its channel's rules: the
    terminal, ``OWNER_TELEGRAM_IDS`` and paired ids, ``OWNER_PHONE``, WhatsApp's own
    chat). The owner's chat with the agent was answered as it came: it is no news."""
    return reach.is_owner(message.channel, message.sender_id, message.meta)


async def _messages_since(deps: AgentDeps, since: datetime) -> int:
    """Contacts' messages since ``since``: news the owner may not have seen."""
    news = [s for s in STATUSES if s != "failed"]
    arrived = await arrivals_since(deps.db, since, statuses=news)
    return sum(is_news(m) and not from_owner(m, deps.reach) for m in arrived)


CHECK_IN = (
    "The owner asked for these check-ins: your final answer is sent to them (empty: nothing "
    "is sent; never send it again yourself)"
)


def closing(tools: Collection[str], check_ins: bool = False) -> str:
    """The brief's last line, naming only tools this pulse is offered, and saying where
    the final answer goes: to the owner when they asked for check-ins, else the log."""
    reach = [name for name in ("raise_alert", "send_message") if name in tools]
    text = "Check on what matters. "
    if check_ins:
        text += CHECK_IN
    elif reach:
        names = " or ".join(reach)
        text += "Your final text is only logged. "
        text += f"Reach the owner only with {names}, when it matters or your notes ask for it"
    else:
        text += "No tool in this run reaches the owner; your final text is only logged"
    if "manage_pulse" in tools:
        text += "; save what the next pulse should know with manage_pulse update_notes"
    return text + "."


def mcp_servers(deps: AgentDeps, tools: Collection[str]) -> list[str]:
    """The connected MCP servers, when this pulse is offered their tools."""
    offered = any(name == "mcp_call" or "__" in name for name in tools)
    return deps.mcp.connected() if deps.mcp is not None and offered else []


def _since(state: PulseState, now: datetime) -> datetime:
    stamp = state.last_check_at or state.last_pulse_at
    return stamp or now - timedelta(days=1) / max(1, state.pulses_per_day)


def since_heading(state: PulseState, since: datetime, tz: ZoneInfo, now: datetime) -> str:
    """Where "since" starts, named truly: the last pulse, the last idle check (nothing
    was new then, and no model ran), or no pulse yet at all."""
    at = short_time(since, tz, now)
    last_pulse, last_check = state.last_pulse_at, state.last_check_at
    if last_check is not None and (last_pulse is None or last_check > last_pulse):
        return f"## Since the last check ({at}; nothing was new then)"
    if last_pulse is None:
        return f"## Since {at} (no pulse has run before)"
    return f"## Since the last pulse ({at})"


async def build_brief(
    deps: AgentDeps,
    state: PulseState,
    jobs: CronService,
    runs: RunStore,
    tz: ZoneInfo,
    now: datetime,
    tools: Collection[str] = (),
) -> PulseBrief:
    """``tools``: the names this pulse will be offered (the brief names no other)."""
    since = _since(state, now)
    try:
        schedule = state.schedule(tz)
        upcoming = next_pulse(schedule, now)
        # This pulse is not counted yet (it is, once it has run): it is one of the day's
        # cap, and not one of the slots after now.
        after = remaining_today(schedule, state.done_on(now.astimezone(tz).date()) + 1, now)
    except PulseConfigError:
        upcoming, after = None, 0
    horizon = upcoming or now + timedelta(days=1) / max(1, state.pulses_per_day)
    alerts = await open_alerts(deps)
    due = await jobs.fires_within(now, horizon, limit=10)
    ran = await runs.ended_since(since, "cron", limit=10)
    inbound = await _messages_since(deps, since)
    counts = {
        "notes": len(state.notes.strip()),
        "new_alerts": sum(1 for a in alerts if _is_new(a, since)),
        "due_jobs": len(due),
        "runs": len(ran),
        "messages": inbound,
    }
    idle = not any(counts.values())
    parts = [
        f"Pulse check-in, {now.astimezone(tz):%A %d %B %H:%M} ({tz.key}). "
        f"Pulses left today after this one: {after}."
    ]
    parts.append("## Your notes\n" + (state.notes.strip() or "(none)"))
    if alerts:
        parts.append("## Open alerts\n" + "\n".join(_alert_line(a) for a in alerts[:10]))
    if due:
        parts.append(
            f"## Cron jobs due before the next pulse ({short_time(horizon, tz, now)})\n"
            + "\n".join(
                f"- {short_time(at, tz, now)} {job.name} [{job.id}]: {_clip(job.instruction, 120)}"
                for at, job in due
            )
        )
    happened = [f"- {inbound} new message(s) from contacts"] if inbound else []
    happened += [_run_line(run, tz, now) for run in ran]
    parts.append(
        since_heading(state, since, tz, now)
        + "\n"
        + ("\n".join(happened) if happened else "- nothing")
    )
    if servers := mcp_servers(deps, tools):
        parts.append(f"MCP servers connected (their tools are offered): {', '.join(servers)}.")
    parts.append(closing(tools, state.check_ins))
    return PulseBrief(text="\n\n".join(parts), idle=idle, since=since, counts=counts)


def _alert_line(alert: Alert) -> str:
    code, severity = alert.code, alert.severity
    if alert.outside_part("title") is not None:  # a posted alert's words: in their block
        return f"- #{code} {severity}: {model_field(alert, 'title', 100)}"
    return f"- #{code} {severity}: {_clip(alert.title, 100)}"


def _run_line(run: Run, tz: ZoneInfo, now: datetime) -> str:
    detail = run.error if run.status != "success" else run.result
    line = f"- cron {run.name or run.job_id} {run.status}"
    line += f" at {short_time(run.scheduled_for, tz, now)}"
    return line + (f": {_clip(str(detail), 160)}" if detail else "")
