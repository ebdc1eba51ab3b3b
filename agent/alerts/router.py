"""The alert router: takes alerts in, routes them by severity, escalates until acknowledged.

The routing policy in force is ``routing``: the loaded policy with the owner's own
settings over it (how long a warning waits for its SMS, or that it never gets one).

Everything goes through one timer per alert kept in MongoDB (``next_action`` at
``next_escalation_at``): a new alert is stored with a ``deliver`` timer due now and
handled at once; repeats, snooze ends and mute ends are later timers. ``tick(now)``
runs whatever is due, so a restarted process (or a test with its own clock) picks up
exactly where the last one stopped. Messages go through the outbox under keys
``alert:<code>:<seq>:<channel>``, so a step retried after a crash is not sent twice.
Phone calls have their own time on the alert (``call_at``), armed by each round of a
critical alert and rung by ``tick`` after the steps (``agent.alerts.calls``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from agent.alerts import policy as r
from agent.alerts.calls import Caller
from agent.alerts.directives import Directive, format_duration
from agent.alerts.intake import AlertError, Raising, validate
from agent.alerts.lifecycle import Lifecycle, Outcome
from agent.alerts.outcome import Raised, RoutingFacts, routing_facts
from agent.alerts.page_test import PageTests
from agent.alerts.sending import Pager, Sender
from agent.config import Settings
from agent.owner import Listener as OwnerListener
from agent.owner import OwnerPrefs, OwnerSettings
from agent.reach import Reach
from channels.delivery.outbox import Outbox
from runtime.clock import Clock
from runtime.tasks import stop_task, wait_event
from storage.outside import Outside
from storage.repos.alert_record import SEVERITIES, Alert, AlertChanges, Step, stop_timer
from storage.repos.alert_routing import routing_overrides
from storage.repos.alerts import LEASE, AlertStore

log = logging.getLogger(__name__)
RANK: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(SEVERITIES)})
MAX_POLL = 30.0
MAX_STEPS_PER_TICK = 10_000
NO_WARNING_SMS = "warnings never go by SMS (warning_sms_after_minutes is 0)"


class AlertRouter:
    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        outbox: Outbox,
        reach: Reach,
        settings: Settings,
        clock: Clock,
        policy: r.RoutingPolicy | None = None,
        owner: OwnerSettings | None = None,
    ) -> None:
        self.store = AlertStore(db)
        self._db = db
        self._settings = settings
        self.owner = owner or OwnerSettings(db, clock, settings.timezone)
        """Quiet hours, timezone and primary chat; a router built alone reads its own
        (and listens to it); the app's router declares ``owner_listeners`` instead."""
        self._pager = Pager(
            self.store, outbox, reach, settings, lambda: self.sms_per_hour, self.owner
        )
        self._clock = clock
        self.policy = policy or r.RoutingPolicy()
        self.calls = Caller(
            self.store, outbox, reach, settings, clock, self.apply, self._pager.chats
        )
        """Phone calls: rung from ``tick``; their webhook is ``calls.answer``."""
        self._sender = Sender(self.store, self._pager, lambda: self.routing, self.calls.next_call)
        self.page_tests = PageTests(
            self.store,
            self._pager,
            outbox,
            self.calls,
            reach,
            settings,
            clock,
            lambda: self.owner.tz,
        )
        """Test pages (``watchkeeper page-test``): their own short ladder, never ``tick``'s."""
        self._fixed_policy = policy is not None
        self.lifecycle = Lifecycle(self.store, lambda: self.owner.tz)
        if owner is None:
            for listener in self.owner_listeners:
                self.owner.listen(listener)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def owner_listeners(self) -> tuple[OwnerListener, ...]:
        """What the router does when the owner's settings change (re-plan held alerts,
        and warnings waiting for their SMS)."""
        return (self._quiet_changed, self._warning_wait_changed)

    @property
    def routing(self) -> r.RoutingPolicy:
        """The policy in force: ``policy`` with the owner's settings over it."""
        return self.policy.for_owner(self.owner.current)

    @property
    def sms_per_hour(self) -> int:
        """Pages share the one hourly budget of every SMS; routing may only lower it."""
        return min(self.policy.sms_per_hour, self._settings.sms_per_hour)

    # -- lifecycle of the router itself ----------------------------------------------

    async def start(self, *, background: bool = True) -> None:
        if not self._fixed_policy:
            self.policy = r.RoutingPolicy.of(await routing_overrides(self._db))
        await self.page_tests.start()
        if background:
            self._task = asyncio.create_task(self._run(), name="alerts")

    async def stop(self) -> None:
        await self.page_tests.stop()
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            delay = MAX_POLL
            try:
                await self.tick()
                due = await self.store.next_due()
                if due is not None:
                    delay = min(MAX_POLL, max(0.2, (due - self._clock()).total_seconds()))
            except Exception:
                log.exception("alert timer loop error")
            self._wake.clear()
            await wait_event(self._wake, delay)

    # -- raising ---------------------------------------------------------------------

    async def raise_alert(
        self,
        *,
        severity: Any,
        title: Any,
        body: Any = "",
        dedupe_key: Any = None,
        source: Any = "agent",
        reason: Outside | None = None,
    ) -> Raised:
        """Store and route an alert; returns it as stored now, with ``deduplicated`` and
        ``routing`` (where it went and what comes next: ``outcome.routing_facts``).

        ``title`` and ``body`` may be ``Outside`` (an alert posted from outside, one a
        run wrote after reading outside text); ``reason`` is outside words the alert
        quotes (what a monitored site answered). Each is sent quoted, as the words of
        where it came from, beside our own (``policy.chat_text``)."""
        fields = validate(severity, title, body, dedupe_key, source, reason)
        now = self._clock()
        key = fields.dedupe_key
        if key is not None:
            repeated = await self._repeat(key, fields, now)
            if repeated is not None:
                return repeated
        code = await self.store.next_code()
        new = Alert(
            id=None,
            code=code,
            severity=fields.severity,
            title=fields.title,
            status="open",
            created_at=now,
            body=fields.body,
            reason=fields.reason,
            outside=fields.outside,
            source=fields.source,
            dedupe_key=key,
            open_key=key,
            updated_at=now,
            last_seen_at=now,
            next_action="deliver",
            next_escalation_at=now,
            history=(Step(now, fields.source, "raised", fields.severity),),
        )
        stored = await self.store.insert(new)
        if stored is None:  # raised concurrently with the same key
            repeated = await self._repeat(key or "", fields, now)
            if repeated is not None:
                return repeated
            raise AlertError("an alert with this dedupe_key changed meanwhile; try again")
        log.info("alert #%s (%s) raised by %s", code, fields.severity, fields.source)
        await self._run_now(stored.id, now)
        return await self._raised(stored, now, deduplicated=False)

    async def _repeat(self, key: str, fields: Raising, now: datetime) -> Raised | None:
        """Count a repeat; re-send only when the severity went up (warning -> critical)."""
        record = await self.store.repeat(key, now)
        if record is None:
            return None
        new, old = fields.severity, record.severity
        if RANK[new] > RANK[old] and record.status in ("open", "acknowledged", "snoozed"):
            raised = await self.store.change(
                record.id,
                when_status=(record.status,),
                set_={
                    "severity": new,
                    "status": "open",
                    "sms_rounds": 0,
                    "next_action": "deliver",
                    "next_escalation_at": now,
                    "last_page": None,
                    "lead": f"Now {r.LABELS[new]} (was {old}).",
                },
                unset=("snoozed_until",),
                history=[Step(now, fields.source, "severity raised", f"{old} -> {new}")],
            )
            if raised is not None:
                await self._run_now(raised.id, now)
                return await self._raised(raised, now, deduplicated=True)
        routing = await self._routing(record, now, sent_now=False)
        return Raised(record, True, routing)

    async def _raised(self, alert: Alert, now: datetime, *, deduplicated: bool) -> Raised:
        """``alert`` as it is after its first round (read again), and where it went."""
        current = await self.store.by_code(alert.code) or alert
        routing = await self._routing(current, now, sent_now=True)
        return Raised(current, deduplicated, routing)

    async def _routing(self, alert: Alert, now: datetime, *, sent_now: bool) -> RoutingFacts:
        budget = alert.last_page == "budget"
        frees = await self.store.budget_frees_at() if budget else None
        return routing_facts(
            alert,
            now,
            self.routing,
            sent_now=sent_now,
            sms_ready=self._pager.sms_ready(),
            sms_per_hour=self.sms_per_hour,
            budget_frees_at=frees,
        )

    async def open_alerts(self, limit: int = 20) -> list[Alert]:
        """Unresolved alerts, newest first, as shown to tools, the API and the pulse."""
        return await self.store.unresolved(limit)

    # -- owner actions ----------------------------------------------------------------

    async def apply(self, code: str, directive: Directive, by: str) -> Outcome:
        """Apply an alert directive (ack, resolve, snooze, mute, unmute) by code."""
        alert = await self.store.by_code(code)
        if alert is None:
            return Outcome(f"There is no alert #{code.lstrip('#')}.")
        outcome = await self.lifecycle.apply(alert, directive, by, self._clock(), self.routing)
        if outcome.changed:
            self._wake.set()
            self.page_tests.changed()
        return outcome

    async def escalate(self, code: str, by: str) -> Outcome:
        """The owner asks for the next escalation step now: an SMS page (every chat when
        SMS cannot go), quiet hours or not. An acknowledged or snoozed alert is open
        again, so its escalation carries on until it is acknowledged once more."""
        alert = await self.store.by_code(code)
        if alert is None:
            return Outcome(f"There is no alert #{code.lstrip('#')}.")
        code, status, now = alert.code, alert.status, self._clock()
        if status == "resolved":
            return Outcome(f"#{code} is resolved; there is nothing to escalate.", alert)
        if status == "muted":
            return Outcome(f"#{code} is muted; unmute it first.", alert)
        if alert.test:
            return Outcome(f"#{code} is a test page: it takes its next step by itself.", alert)
        claimed = await self.store.change(  # the lease keeps the timer loop off it meanwhile
            alert.id,
            when_status=(status,),
            set_={"status": "open", "next_action": "sms", "next_escalation_at": now + LEASE},
            unset=("snoozed_until",),
            history=[Step(now, by, "escalation requested")],
        )
        if claimed is None:
            return Outcome(f"#{code} changed just now; please try again.", alert)
        paged, chats = await self._sender.escalate(
            claimed, now, "Escalated on request.", call=False
        )
        self._wake.set()
        current = await self.store.by_code(code)
        if paged == "sent":
            return Outcome(f"#{code} escalated: paged by SMS.", current, True)
        why = {"budget": "the hourly SMS budget is used up", "failed": "the SMS failed"}
        reason = why.get(paged, "SMS is not set up")
        if chats:
            return Outcome(f"#{code} escalated to {', '.join(chats)}: {reason}.", current, True)
        return Outcome(f"#{code} could not be escalated: {reason} and no chat took it.", current)

    # -- timers ------------------------------------------------------------------------

    async def tick(self, now: datetime | None = None) -> int:
        """Run every timer due at ``now``; returns how many steps ran."""
        now = now or self._clock()
        steps = 0
        while steps < MAX_STEPS_PER_TICK:
            alert = await self.store.claim_due(now)
            if alert is None:
                break
            steps += 1
            try:
                await self._step(alert, now)
            except Exception:  # the lease makes it due again in a few minutes
                log.exception("alert #%s step %s failed", alert.code, alert.next_action)
        return steps + await self.calls.ring_due(now)

    async def _run_now(self, alert_id: Any, now: datetime) -> None:
        alert = await self.store.claim_due(now, alert_id)
        if alert is not None:
            await self._step(alert, now)
            await self.calls.ring_due(now)  # ALERT_CALL_AFTER_MINUTES=0: with the first SMS
        self._wake.set()

    async def _step(self, alert: Alert, now: datetime) -> None:
        action, status = alert.next_action, alert.status
        if action == "wake" and status == "snoozed":
            await self._reopen(alert, now, "snooze ended", "Snooze over.")
        elif action == "unmute" and status == "muted":
            await self._mute_over(alert, now)
        elif action in ("deliver", "sms") and status == "open":
            if action == "sms" and await self._warning_stays_off_sms(alert, now):
                return
            if alert.severity != "critical":
                until = await self.owner.quiet_until(now)
                if until is not None:
                    await self._hold(alert, now, until)
                    return
            if action == "deliver":
                await self._sender.deliver(alert, now)
            else:
                await self._sender.escalate(alert, now)
        else:
            await self.store.change(alert.id, set_=stop_timer())

    async def _warning_stays_off_sms(self, alert: Alert, now: datetime) -> bool:
        """A warning's SMS step after the owner turned warning SMS off: stopped here."""
        if alert.severity != "warning" or alert.sms_rounds > 0:
            return False
        await self.owner.fresh()  # the change may come from another process
        if self.routing.warnings_page:
            return False
        await self.store.change(
            alert.id,
            set_={"held": False, **stop_timer()},
            history=[Step(now, "router", "not paged", NO_WARNING_SMS)],
        )
        return True

    async def _warning_wait_changed(self, old: OwnerPrefs, new: OwnerPrefs) -> None:
        """A new wait before a warning's SMS: the timers already armed move by the
        difference (a page due by now goes at once), or stop when warning SMS is off."""
        before = self.policy.for_owner(old).warning_sms_after
        after = self.policy.for_owner(new).warning_sms_after
        if before == after:
            return
        now = self._clock()
        detail = f"{format_duration(before)} -> {format_duration(after)}" if after else None
        for alert in await self.store.waiting_warning_pages():
            due = alert.next_escalation_at  # as stored: the compare-and-set value
            if due is None:
                continue
            timer: AlertChanges = (
                stop_timer()
                if not after
                else {"next_escalation_at": max(now, due - before + after)}
            )
            await self.store.change(  # skipped if a step took the timer meanwhile
                alert.id,
                when_status=("open",),
                when_due=due,
                set_=timer,
                history=[Step(now, "owner", "sms wait changed", detail or NO_WARNING_SMS)],
            )
        self._wake.set()

    async def _quiet_changed(self, old: OwnerPrefs, new: OwnerPrefs) -> None:
        """New quiet hours: held alerts are looked at now (held again if still quiet)."""
        changed = (old.quiet_hours, old.timezone) != (new.quiet_hours, new.timezone)
        if changed and await self.store.release_held(self._clock()):
            self._wake.set()

    async def _hold(self, alert: Alert, now: datetime, until: datetime) -> None:
        history = []
        if not alert.held:
            when = r.local_time(until, now, self.owner.tz)
            history.append(Step(now, "router", "held", f"quiet hours until {when}"))
        await self.store.change(
            alert.id, set_={"held": True, "next_escalation_at": until}, history=history
        )

    async def _reopen(self, alert: Alert, now: datetime, why: str, lead: str) -> None:
        reopened = await self.store.change(
            alert.id,
            when_status=(alert.status,),
            set_={
                "status": "open",
                "sms_rounds": 0,
                "lead": lead,
                "next_action": "deliver",
                "next_escalation_at": now + LEASE,
            },
            unset=("snoozed_until", "muted_until", "status_before_mute", "count_at_mute"),
            history=[Step(now, "router", why)],
        )
        if reopened is not None:
            await self._step(reopened, now)

    async def _mute_over(self, alert: Alert, now: datetime) -> None:
        """A mute ends: tell the owner if it kept happening, else close it quietly."""
        repeats = alert.count - (alert.count_at_mute or alert.count)
        if repeats > 0:
            lead = f"Mute over; it happened {repeats} more time{'s' if repeats > 1 else ''}."
            await self._reopen(alert, now, "mute ended", lead)
            return
        await self.store.change(
            alert.id,
            when_status=("muted",),
            set_={
                "status": "resolved",
                "resolved_at": now,
                "resolved_by": "router",
                **stop_timer(),
            },
            unset=("open_key", "muted_until", "status_before_mute", "count_at_mute"),
            history=[Step(now, "router", "resolved", "mute ended and it did not happen again")],
        )
