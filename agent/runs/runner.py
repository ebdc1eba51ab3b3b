"""Cron and pulse runs through the agent: time-boxed, delivered, never silent.

The engine decides *when* and keeps the run records (``scheduler.fires.recorder``); this
module decides *what happens*: the instruction or pulse brief goes to the agent in
its own conversation, a timeout cancels the work for real, a cron result goes to
the chat that created the job (and a pulse's answer to the owner's chat when they asked
for check-ins), and the engine's failure streaks reach the owner as
a warning. Each outcome carries a typed reason, and the owner's words come from it.

A run's answer is delivered once, whatever happens to its tries: it goes out under
the run's one key (``run:<id>``), and a try after one cut off with its process
(``scheduler.fires.recovery``) first looks whether the answer already went out.

Each run's record keeps its tool calls in short (``call_summaries``): name, arguments
and result in a line each, not the whole exchange, so the dashboard's run page reads
one document; the full messages stay in the run's conversation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.context import AgentDeps, RunContext
from agent.conversation.agent import Agent, AgentReply
from agent.llm.types import ModelMessage, ToolCallPart, ToolResultPart
from agent.runs.briefs import build_brief, cron_prompt, delivery_head
from agent.tools.held import instruction_source, read_outside
from channels.types import OutboundMessage
from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from scheduler.fires.recorder import Go, RunTicket, Skip
from scheduler.pulse.grid import local_day
from scheduler.pulse.store import PulseStore
from storage.repos.runs.record import (
    PASSING,
    CallSummary,
    Delivery,
    Outcome,
    Reason,
    Run,
    Trigger,
    short_error,
)
from storage.repos.runs.store import RunStore

log = logging.getLogger(__name__)
SCHEDULER_SENDER = "scheduler"
PULSE_CONVERSATION = "pulse"
MAX_CALLS = 20
"""Tool calls kept in a run's record, at most."""
TEXT_LIMIT = 200


@dataclass(frozen=True)
class RunnerConfig:
    cron_timeout: float = 120.0
    pulse_timeout: float = 180.0


def reason_text(reason: Reason | None, timeout: float) -> str:
    """A failure in words for the owner: never an exception text."""
    if reason == "timeout":
        return f"it timed out after {timeout:g} s and was stopped"
    if reason == "model_unavailable":
        return "the language model could not be reached"
    if reason == "database_unavailable":
        return "the database could not be reached"
    if reason == "out_of_steps":
        return "it ran out of steps before finishing"
    return "an internal error stopped it"


def timed_out(limit: float) -> Outcome:
    return Outcome(
        "timeout", error=f"timed out after {limit:g} s; the run was cancelled", reason="timeout"
    )


def answer_key(ticket: RunTicket) -> str:
    """The outbox key of a run's answer: one per run, whichever try gives it; the
    notices of a try (``:retrying``, ``:failed``) add a suffix."""
    return f"run:{ticket.id}"


class Runner:
    """The work of a scheduled run; ``scheduler.fires.recorder.RunRecorder`` calls it."""

    def __init__(
        self,
        *,
        deps: AgentDeps,
        agent: Agent,
        jobs: CronService,
        pulse: PulseStore,
        runs: RunStore,
        config: RunnerConfig | None = None,
    ) -> None:
        self.deps = deps
        self.agent = agent
        self.jobs = jobs
        self.pulse = pulse
        self.runs = runs
        self.config = config or RunnerConfig()

    def now(self) -> datetime:
        return self.deps.clock()

    # --- running through the agent -------------------------------------------------------

    def _outcome(self, reply: AgentReply, spent: str) -> Outcome:
        """How a run through the agent went (``spent``: why the budget stopped it, when
        it did). Its model calls waited their turn in the provider's adaptive limit,
        shared with chats (``agent.llm.limiter``)."""
        if reply.failed:
            # The provider's words (redacted by its adapter) for the record and the
            # dashboard; the owner's warning says it in our words (``reason_text``).
            why = reply.failure.removeprefix("model_unavailable: ")
            error = short_error(f"model unavailable: {why}" if why else "model unavailable")
            outcome = Outcome("failed", error=error, reason="model_unavailable")
        elif reply.budget_spent:  # spent before its first call, or crossed during the run
            detail = f"stopped before finishing: {spent}" if reply.steps else spent
            outcome = Outcome("skipped", error=detail, reason="budget_spent")
        elif reply.exhausted:
            outcome = Outcome(
                "failed",
                result=reply.text,
                error="ran out of steps before finishing",
                reason="out_of_steps",
            )
        else:
            outcome = Outcome("success", result=reply.text)
        outcome.tool_calls = list(reply.tool_calls)
        if reply.steps:
            outcome.calls = call_summaries(reply.steps)
        outcome.input_tokens = reply.usage.input_tokens
        outcome.output_tokens = reply.usage.output_tokens
        outcome.cached_input_tokens = reply.usage.cached_input_tokens
        return outcome

    async def _spent(self, reply: AgentReply) -> str:
        """Why the budget stopped ``reply``'s run ("" when it did not)."""
        if reply.failed or not reply.budget_spent:
            return ""
        return self.deps.budget.skip_detail(await self.deps.budget.view())

    def _context(
        self, kind: str, ticket: RunTicket, channel: str, chat: str, words: str | None = None
    ) -> RunContext:
        return RunContext(
            deps=self.deps,
            tier="owner",  # scheduled by the owner (a cron job) or the owner's own pulse
            kind="cron" if kind == "cron" else "pulse",
            channel=channel,
            chat_id=chat,
            sender=SCHEDULER_SENDER,
            conversation_key=f"cron:{ticket.job_id}" if kind == "cron" else PULSE_CONVERSATION,
            run_id=ticket.id,
            job_id=ticket.job_id,
            owner_words=words,
        )

    async def run_cron(self, job: CronJob, ticket: RunTicket) -> Outcome:
        """One fire of ``job`` in its own conversation; the answer is delivered."""
        if ticket.attempt > 1 and (earlier := await self._answer_sent(ticket)) is not None:
            return earlier  # an earlier try delivered it before it was cut off
        # The budget is checked once, by the model call's reservation (``run_loop``): a
        # day already spent makes no call and the run is skipped (``_outcome``).
        # An instruction the owner wrote is their own words: its run may alert them.
        words = job.instruction if job.source is None else None
        ctx = self._context("cron", ticket, job.origin_channel, job.origin_chat_id, words)
        if job.source is not None:  # its instruction is not the owner's words
            read_outside(ctx, instruction_source(job.source))
        timeout = self.config.cron_timeout
        try:  # a timeout cancels the work for real
            async with asyncio.timeout(timeout):
                reply = await self.agent.respond(
                    cron_prompt(job, ticket, self.now()), ctx, isolated=True
                )
        except TimeoutError:
            outcome = timed_out(timeout)
        else:
            outcome = self._outcome(reply, await self._spent(reply) if reply.budget_spent else "")
        text, key = "", answer_key(ticket)
        if outcome.status == "success":
            if answer := outcome.result.strip():
                text = f"{delivery_head(job, ticket, self.now())}\n{answer}"
            else:
                outcome.nothing_to_deliver = True  # empty answer: nothing worth reporting
        elif outcome.reason == "budget_spent":
            outcome.nothing_to_deliver = True  # the budget's own notice tells the owner, once
        elif ticket.will_retry and outcome.reason in PASSING:
            # Tried again within the fire's grace window: said once, on the first try.
            if ticket.attempt == 1:
                reason = reason_text(outcome.reason, timeout)
                text = f"⚠️ {job.name}: {reason}; I will try again shortly."
                key = f"{key}:retrying"
        else:
            reason = reason_text(outcome.reason, timeout)
            tries = f" (tried {ticket.attempt} times)" if ticket.attempt > 1 else ""
            text = f"⚠️ {job.name}: this run did not complete — {reason}{tries}."
            key = f"{key}:failed"
        if not text:
            return outcome
        channel, chat = job.origin_channel, job.origin_chat_id
        if channel not in self.deps.channels:  # the job's chat is not running here
            target = self.deps.reach.chat(primary=self.deps.primary_channel)
            channel, chat = target.channel, target.chat_id
        outcome.delivery = Delivery(channel, chat, key)
        try:
            await self.deps.outbox.enqueue(
                OutboundMessage(channel=channel, chat_id=chat, text=text, idempotency_key=key)
            )
        except Exception as exc:  # the run itself is done; say so in its record
            log.exception("could not queue the result of cron job %s", job.id)
            outcome.delivery = Delivery(channel, chat, key, error=type(exc).__name__)
        return outcome

    async def _answer_sent(self, ticket: RunTicket) -> Outcome | None:
        """The outcome of an earlier try of this run whose answer is already in the
        outbox (the outbox sends what it holds), or None."""
        key = answer_key(ticket)
        sent = await self.deps.outbox.stored(key)
        if sent is None:
            return None
        log.info("run %s: its answer went out before try %d; not asked again",
                 ticket.id, ticket.attempt)  # fmt: skip
        delivery = Delivery(sent.channel, sent.chat_id, key, earlier_try=True)
        return Outcome("success", result=sent.text, delivery=delivery)

    async def _enqueue(self, channel: str, chat: str, text: str, key: str, what: str) -> Delivery:
        try:
            await self.deps.outbox.enqueue(
                OutboundMessage(channel=channel, chat_id=chat, text=text, idempotency_key=key)
            )
        except Exception as exc:  # the run itself is done; say so in its record
            log.exception("could not queue the result of %s", what)
            return Delivery(channel, chat, key, error=type(exc).__name__)
        return Delivery(channel, chat, key)

    async def _check_in(self, outcome: Outcome, channel: str, chat: str, key: str) -> None:
        """A check-in the owner asked for: the pulse's answer goes to them, under the
        run's one key (so once, whichever try gives it); an empty one sends nothing."""
        if outcome.status != "success":
            return  # a failure is the engine's to report, as for any pulse
        text = outcome.result.strip()
        if not text:
            outcome.nothing_to_deliver = True
            return
        outcome.delivery = await self._enqueue(channel, chat, text, key, "a check-in")

    def _pulse_tools(self) -> list[str]:
        """The tools a pulse is offered now, so its brief names no other."""
        target = self.deps.reach.chat()
        probe = RunContext(
            deps=self.deps,
            tier="owner",
            kind="pulse",
            channel=target.channel,
            chat_id=target.chat_id,
            sender=SCHEDULER_SENDER,
            conversation_key=PULSE_CONVERSATION,
        )
        return self.agent.catalog.for_context(probe).names

    async def plan_pulse(self, now: datetime, trigger: Trigger) -> Skip | Go:
        """Skipped when the daily token budget is spent, over the daily cap or idle (no
        model call); else the work.

        A pulse asked for by hand (``trigger`` other than ``schedule``) runs even when
        idle, but it still counts against the daily cap.
        """
        if (spent := await self.deps.budget.blocked()) is not None:  # the owner is told once
            return Skip("budget_spent", self.deps.budget.skip_detail(spent))
        tz = self.pulse.tz
        state = await self.pulse.get()
        if state.done_on(local_day(now, tz)) >= state.pulses_per_day:
            detail = (
                f"daily cap reached ({state.pulses_per_day} pulses); it resets at local midnight"
            )
            return Skip("daily_cap", detail)
        brief = await build_brief(
            self.deps, state, self.jobs, self.runs, tz, now, tools=self._pulse_tools()
        )
        if brief.idle and trigger == "schedule":
            await self.pulse.record_check(now)
            return Skip("idle", "idle: no notes, nothing new, nothing due")

        async def work(ticket: RunTicket) -> Outcome:
            target = self.deps.reach.chat(primary=self.deps.primary_channel)
            earlier = None
            if state.check_ins and ticket.attempt > 1:
                earlier = await self._answer_sent(ticket)  # sent before a cut-off try
            if earlier is not None:
                outcome = earlier
            else:
                ctx = self._context("pulse", ticket, target.channel, target.chat_id)
                limit = self.config.pulse_timeout
                try:  # a timeout cancels the work for real
                    async with asyncio.timeout(limit):
                        reply = await self.agent.respond(brief.text, ctx, isolated=True)
                except TimeoutError:
                    outcome = timed_out(limit)
                else:
                    outcome = self._outcome(
                        reply, await self._spent(reply) if reply.budget_spent else ""
                    )
                if state.check_ins:
                    key = answer_key(ticket)
                    await self._check_in(outcome, target.channel, target.chat_id, key)
            if not (ticket.will_retry and outcome.reason in PASSING):
                await self.pulse.record_done(now)  # a try to be repeated is not counted
            return outcome

        return Go(work, facts=brief.counts)

    # --- failures ---------------------------------------------------------------------

    async def warn_failures(self, run: Run, streak: int, job: CronJob | None) -> None:
        """The engine saw ``streak`` failed runs in a row: alert the owner, as a warning
        or, for a job with ``on_failure`` critical, a critical alert (paged by SMS)."""
        label = f"Cron job “{job.name}”" if job is not None else "The pulse"
        if job is not None and job.once:
            label = f"One-time job “{job.name}”"
        title = f"{label} failed" + (f" {streak} times in a row" if streak > 1 else "")
        critical = job is not None and job.on_failure == "critical"
        alone = critical or (job is not None and job.once)  # reported at its first failure
        body = f"Last run: {run.status} — {run.error or 'no detail'}."
        gave_up = run.gave_up
        if gave_up:  # a fire that could not run in its window, whatever the streak
            due = run.scheduled_for or run.began or self.now()
            when = due.astimezone(self.pulse.tz).strftime("%H:%M")
            title = f"{label} could not run ({when})"
            tried = f" after {run.attempts} tries" if run.attempts > 1 else ""
            body = f"{reason_text(run.reason, 0).capitalize()}{tried}. {body}"
        if job is not None:
            body += f" Job id {job.id}; reply 'pause' to stop it."
        source = f"cron:{job.id}" if job is not None else "pulse"
        await self.warn_owner(
            title,
            body,
            dedupe_key=f"run-failures:{source}",
            source=source,
            first=streak == (1 if alone else 2) or gave_up,
            key=f"warn:{run.id}{':gave-up' if gave_up else ''}",
            severity="critical" if critical else "warning",
        )

    async def warn_missed(self, runs: Sequence[Run], jobs: Mapping[str, CronJob]) -> None:
        """Fires missed past their grace window (Watchkeeper was down or stalled at the
        time): one alert for the sweep that found them, naming each job and its missed
        times on the owner's clock; critical when a job's ``on_failure`` says so."""
        groups: dict[str, list[datetime]] = {}
        for run in runs:
            if run.scheduled_for is not None:
                groups.setdefault(str(run.job_id), []).append(run.scheduled_for)
        tz = self.pulse.tz
        lines = []
        for job_id, moments in groups.items():
            job = jobs.get(job_id)
            label = f"“{job.name}”" if job is not None else f"Job {job_id}"
            shown = [m.astimezone(tz).strftime("%a %d %b %H:%M") for m in sorted(moments)[:5]]
            more = f" and {len(moments) - 5} more" if len(moments) > 5 else ""
            lines.append(f"{label}: {', '.join(shown)}{more}")
        count = len(runs)
        if len(groups) == 1:
            job = jobs.get(next(iter(groups)))
            label = f"Cron job “{job.name}”" if job is not None else "A cron job"
            title = f"{label} missed {count} scheduled run" + ("s" if count > 1 else "")
        else:
            title = f"{count} scheduled runs were missed"
        body = (
            "Watchkeeper was not running (or was stalled) when they were due, past their "
            "grace window, so they did not run:\n" + "\n".join(lines)
        )
        named = [job for job_id in groups if (job := jobs.get(job_id)) is not None]
        critical = any(job.on_failure == "critical" for job in named)
        first = runs[0].started_at or self.now()
        recorded = first.isoformat(timespec="seconds")
        await self.warn_owner(
            title,
            body,
            dedupe_key=f"missed:{recorded}",
            source="scheduler",
            key=f"warn:missed:{recorded}",
            severity="critical" if critical else "warning",
        )

    async def warn_owner(
        self,
        title: str,
        body: str,
        *,
        dedupe_key: str,
        source: str,
        first: bool = True,
        key: str | None = None,
        severity: str = "warning",
    ) -> None:
        """An alert (a warning unless told) through the alert router, or else a message on
        the owner's chat (only for the first failure of a streak: a chat has no dedupe)."""
        if self.deps.alerts is not None:
            try:
                await self.deps.alerts.raise_alert(
                    severity=severity, title=title, body=body, dedupe_key=dedupe_key, source=source
                )
                return
            except Exception:
                log.exception("alert router refused a failure warning; using the chat")
        if not first:
            return
        target = self.deps.reach.chat(primary=self.deps.primary_channel)
        await self.deps.outbox.enqueue(
            OutboundMessage(
                channel=target.channel,
                chat_id=target.chat_id,
                text=f"⚠️ {title}\n{body}",
                idempotency_key=key or f"warn:{uuid.uuid4().hex}",
            )
        )


def short_json(value: Any, limit: int = TEXT_LIMIT) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_summaries(steps: Sequence[ModelMessage]) -> list[CallSummary]:
    """Each tool call of ``steps`` in order (at most ``MAX_CALLS``), with its result."""
    results: dict[str, ToolResultPart] = {}
    calls: list[ToolCallPart] = []
    for message in steps:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.append(part)
            elif isinstance(part, ToolResultPart):
                results[part.call_id] = part
    summaries: list[CallSummary] = []
    for call in calls[:MAX_CALLS]:
        result = results.get(call.id)
        shown = short_json(result.result) if result is not None else ""
        summaries.append(CallSummary(call.name, short_json(call.arguments), shown))
    return summaries
