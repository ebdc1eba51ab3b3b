"""Cron and pulse runs through the agent: recorded, time-boxed, delivered, never silent.

The engine decides *when*; this module decides *what happens*: a run record is
opened before the model is called and closed with a status the system sets
(``success``, ``failed``, ``timeout``, ``skipped``), a timeout cancels the work for
real, a cron result goes to the chat that created the job, and two failures in a
row of the same job warn the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.context import AgentDeps, RunContext
from agent.conversation.agent import Agent
from agent.runs.pulse_brief import build_brief
from channels.outbox import Outbox
from channels.types import Channel, OutboundMessage
from scheduler.jobs import CronJob, CronService
from scheduler.pulse_grid import local_day
from scheduler.pulse_state import PulseStore
from scheduler.runs import FAILED, Outcome, RunKindName, RunStore

log = logging.getLogger(__name__)
Doc = dict[str, Any]
SCHEDULER_SENDER = "scheduler"
PULSE_CONVERSATION = "pulse"


@dataclass(frozen=True)
class AutonomyConfig:
    cron_timeout: float = 120.0
    pulse_timeout: float = 180.0
    max_concurrent: int = 8
    """Scheduled runs talking to the model at once; the others queue (the timeout starts
    when a run gets its turn, so a busy minute does not time runs out)."""


def _reason(outcome: Outcome, timeout: float) -> str:
    """A failure in words for the owner: never an exception text."""
    if outcome.status == "timeout":
        return f"it timed out after {timeout:g} s and was stopped"
    if outcome.error == "model unavailable":
        return "the language model could not be reached"
    if outcome.error and outcome.error.startswith("ran out of steps"):
        return "it ran out of steps before finishing"
    return "an internal error stopped it"


class Autonomy:
    def __init__(
        self,
        *,
        deps: AgentDeps,
        agent: Agent,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        jobs: CronService,
        pulse: PulseStore,
        runs: RunStore,
        config: AutonomyConfig | None = None,
    ) -> None:
        self.deps = deps
        self.agent = agent
        self.outbox = outbox
        self.channels = channels
        self.jobs = jobs
        self.pulse = pulse
        self.runs = runs
        self.config = config or AutonomyConfig()
        self._locks: dict[str, asyncio.Lock] = {}
        self._model_slots = asyncio.Semaphore(self.config.max_concurrent)

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, key: str) -> AsyncIterator[None]:
        """Runs sharing a conversation (one job, or the pulse) take turns: each exchange
        appends to the conversation, which allows one writer at a time."""
        async with self._locks.setdefault(key, asyncio.Lock()):
            yield

    def now(self) -> datetime:
        return self.deps.clock()

    def owner_chat(self) -> tuple[str, str]:
        """The owner's primary chat: Telegram when it runs and an owner id is set."""
        ids = self.deps.settings.owner_telegram_ids
        if "telegram" in self.channels and ids:
            return "telegram", str(ids[0])
        return "console", "owner"

    # --- running through the agent -------------------------------------------------------

    async def _execute(self, text: str, ctx: RunContext, limit: float) -> Outcome:
        queued = time.perf_counter()
        async with self._model_slots:
            waited = round((time.perf_counter() - queued) * 1000, 1)
            outcome = await self._respond(text, ctx, limit)
        outcome.extra["queued_ms"] = waited
        return outcome

    async def _respond(self, text: str, ctx: RunContext, limit: float) -> Outcome:
        try:
            async with asyncio.timeout(limit):
                reply = await self.agent.respond(text, ctx, isolated=True)
        except TimeoutError:
            return Outcome("timeout", error=f"timed out after {limit:g} s; the run was cancelled")
        except Exception as exc:
            log.exception("%s run failed", ctx.kind)
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
        if reply.failed:
            outcome = Outcome("failed", error="model unavailable")
        elif reply.exhausted:
            outcome = Outcome(
                "failed", result=reply.text, error="ran out of steps before finishing"
            )
        else:
            outcome = Outcome("success", result=reply.text)
        outcome.tool_calls = list(reply.tool_calls)
        outcome.input_tokens = reply.usage.input_tokens
        outcome.output_tokens = reply.usage.output_tokens
        return outcome

    async def run_cron(
        self, job: CronJob, scheduled_for: datetime, trigger: str = "schedule"
    ) -> Doc:
        """Run one fire of ``job`` in its own conversation and deliver the answer."""
        async with self._one_at_a_time(f"cron:{job.id}"):
            return await self._run_cron(job, scheduled_for, trigger)

    async def _run_cron(self, job: CronJob, scheduled_for: datetime, trigger: str) -> Doc:
        run = await self.runs.start(
            "cron", job.id, scheduled_for, self.now(), trigger=trigger, extra={"name": job.name}
        )
        ctx = RunContext(
            deps=self.deps,
            kind="cron",
            channel=job.origin_channel,
            chat_id=job.origin_chat_id,
            sender=SCHEDULER_SENDER,
            conversation_key=f"cron:{job.id}",
            extra={"job_id": job.id, "job_name": job.name, "run_id": str(run["_id"])},
        )
        timeout = self.config.cron_timeout
        outcome = await self._execute(job.instruction, ctx, timeout)
        if outcome.status == "success":
            text = outcome.result.strip()
            if text:
                outcome.extra["delivery"] = await self._deliver(job, f"{job.name}\n{text}", run)
            else:
                outcome.extra["delivery"] = None  # empty answer: nothing worth reporting
        else:
            notice = f"⚠️ {job.name}: this run did not complete — {_reason(outcome, timeout)}."
            outcome.extra["delivery"] = await self._deliver(job, notice, run)
        done = await self.runs.finish(run, outcome, self.now())
        await self._warn_if_failing("cron", job.id, f"Cron job “{job.name}”", done)
        return done

    async def _deliver(self, job: CronJob, text: str, run: Doc) -> Doc:
        channel, chat = job.origin_channel, job.origin_chat_id
        if channel not in self.channels:
            channel, chat = self.owner_chat()  # the job's chat is not running here
        key = f"run:{run['_id']}"
        delivery: Doc = {"channel": channel, "chat_id": chat, "idempotency_key": key}
        try:
            await self.outbox.enqueue(
                OutboundMessage(channel=channel, chat_id=chat, text=text, idempotency_key=key)
            )
        except Exception as exc:  # the run itself is done; say so in its record
            log.exception("could not queue the result of cron job %s", job.id)
            delivery["error"] = type(exc).__name__
        return delivery

    async def run_pulse(self, scheduled_for: datetime, trigger: str = "schedule") -> Doc:
        """One pulse: skipped when over the daily cap or idle (no model call), else run.

        A pulse asked for by hand (``trigger`` other than ``schedule``) runs even when
        idle, but it still counts against the daily cap.
        """
        async with self._one_at_a_time(PULSE_CONVERSATION):
            return await self._run_pulse(scheduled_for, trigger)

    async def _run_pulse(self, scheduled_for: datetime, trigger: str) -> Doc:
        now = self.now()
        tz = self.pulse.tz
        state = await self.pulse.get()
        if state.done_on(local_day(now, tz)) >= state.pulses_per_day:
            reason = (
                f"daily cap reached ({state.pulses_per_day} pulses); it resets at local midnight"
            )
            return await self.runs.skipped(
                "pulse", None, scheduled_for, now, reason, trigger=trigger
            )
        brief = await build_brief(self.deps, state, self.jobs, self.runs, tz, now)
        if brief.idle and trigger == "schedule":
            await self.pulse.record_check(now)
            return await self.runs.skipped(
                "pulse", None, scheduled_for, now, "idle: no notes, nothing new, nothing due"
            )
        run = await self.runs.start(
            "pulse", None, scheduled_for, now, trigger=trigger, extra={"context": brief.counts}
        )
        channel, chat = self.owner_chat()
        ctx = RunContext(
            deps=self.deps,
            kind="pulse",
            channel=channel,
            chat_id=chat,
            sender=SCHEDULER_SENDER,
            conversation_key=PULSE_CONVERSATION,
            extra={"run_id": str(run["_id"])},
        )
        outcome = await self._execute(brief.text, ctx, self.config.pulse_timeout)
        await self.pulse.record_done(now)
        done = await self.runs.finish(run, outcome, self.now())
        await self._warn_if_failing("pulse", None, "The pulse", done)
        return done

    # --- failures ---------------------------------------------------------------------

    async def _warn_if_failing(
        self, kind: RunKindName, job_id: str | None, label: str, run: Doc
    ) -> None:
        if run.get("status") not in FAILED:
            return
        streak = await self.runs.failure_streak(kind, job_id)
        if streak < 2:
            return
        title = f"{label} failed {streak} times in a row"
        body = f"Last run: {run.get('status')} — {run.get('error') or 'no detail'}."
        if kind == "cron":
            body += f" Job id {job_id}; reply 'pause' to stop it."
        source = f"{kind}:{job_id}" if job_id else kind
        await self.warn_owner(
            title,
            body,
            dedupe_key=f"run-failures:{source}",
            source=source,
            first=streak == 2,
            key=f"warn:{run['_id']}",
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
    ) -> None:
        """A warning alert through the alert router, or else a message on the owner's
        chat (only for the first failure of a streak: a chat has no dedupe)."""
        alerts = self.deps.services.get("alerts")
        raise_alert = getattr(alerts, "raise_alert", None)
        if callable(raise_alert):
            try:
                result = raise_alert(
                    severity="warning", title=title, body=body, dedupe_key=dedupe_key, source=source
                )
                if inspect.isawaitable(result):
                    await result
                return
            except Exception:
                log.exception("alert router refused a failure warning; using the chat")
        if not first:
            return
        channel, chat = self.owner_chat()
        await self.outbox.enqueue(
            OutboundMessage(
                channel=channel,
                chat_id=chat,
                text=f"⚠️ {title}\n{body}",
                idempotency_key=key or f"warn:{uuid.uuid4().hex}",
            )
        )
