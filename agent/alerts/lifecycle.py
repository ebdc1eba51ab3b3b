"""What the owner can do to an alert: ack, resolve, snooze, mute, unmute.

Each change is one conditional update, so it is idempotent: a second "ack" (or a
button pressed twice) finds the alert already acknowledged and says so instead of
doing anything again. The confirmation texts are the ones the owner reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from agent.alerts.directives import Ack, Directive, Mute, Resolve, Snooze, Unmute, format_duration
from agent.alerts.policy import RoutingPolicy, local_time
from storage.repos.alert_record import UNRESOLVED, Alert, AlertChanges, Step, stop_timer
from storage.repos.alerts import AlertStore

CALL_AT: Final = "call_at"
"""When the alert's next phone call is due (``agent.alerts.calls``); every change that
stops the escalation drops it, so a call never rings for an alert the owner answered."""
ALERT_DIRECTIVES = (Ack, Resolve, Snooze, Mute, Unmute)


@dataclass(frozen=True)
class Outcome:
    """The confirmation to send back, the alert as it is now, and whether it changed."""

    text: str
    alert: Alert | None = None
    changed: bool = False


def _noted(note: str | None) -> AlertChanges:
    """The alert's ``note`` field set to ``note``, when there is one."""
    return {"note": note} if note else {}


def _already(alert: Alert, now: datetime, tz: ZoneInfo) -> Outcome:
    code, status, until = alert.code, alert.status, alert.until
    if until is not None:
        return Outcome(f"#{code} is {status} until {local_time(until, now, tz)}.", alert)
    return Outcome(f"#{code} was already {status}.", alert)


class Lifecycle:
    def __init__(self, store: AlertStore, tz: ZoneInfo | Callable[[], ZoneInfo]) -> None:
        """``tz``: the owner's timezone, or a getter when it can change (``OwnerSettings``)."""
        self._store = store
        self._zone = tz

    @property
    def _tz(self) -> ZoneInfo:
        return self._zone if isinstance(self._zone, ZoneInfo) else self._zone()

    async def apply(
        self, alert: Alert, directive: Directive, by: str, now: datetime, policy: RoutingPolicy
    ) -> Outcome:
        if isinstance(directive, Ack):
            return await self.acknowledge(alert, by, now, directive.note)
        if isinstance(directive, Resolve):
            return await self.resolve(alert, by, now, directive.note)
        if isinstance(directive, Snooze):
            return await self.snooze(alert, directive.duration, by, now)
        if isinstance(directive, Mute):
            return await self.mute(alert, directive.duration, by, now)
        if isinstance(directive, Unmute):
            return await self.unmute(alert, by, now, policy)
        return Outcome(f"'{directive.kind}' does not apply to an alert itself.", alert)

    async def _reread(self, alert: Alert) -> Alert:
        return await self._store.by_code(alert.code) or alert

    async def acknowledge(
        self, alert: Alert, by: str, now: datetime, note: str | None = None
    ) -> Outcome:
        """``note``: the owner's words about it, kept on the alert (``note``) and in its
        history."""
        done = await self._store.change(
            alert.id,
            when_status=("open", "snoozed", "muted"),
            set_={
                "status": "acknowledged",
                "acknowledged_at": now,
                "acknowledged_by": by,
                **_noted(note),
                **stop_timer(),
            },
            unset=("snoozed_until", "muted_until", CALL_AT),
            history=[Step(now, by, "acknowledged", note)],
        )
        if done is None:
            return _already(await self._reread(alert), now, self._tz)
        return Outcome(f"#{alert.code} acknowledged, escalation stopped.", done, True)

    async def resolve(
        self, alert: Alert, by: str, now: datetime, note: str | None = None
    ) -> Outcome:
        """``note``: what the owner said of it ("it was the disk"), kept as for ``ack``."""
        done = await self._store.change(
            alert.id,
            when_status=UNRESOLVED,
            set_={
                "status": "resolved",
                "resolved_at": now,
                "resolved_by": by,
                **_noted(note),
                **stop_timer(),
            },
            unset=("open_key", "snoozed_until", "muted_until", CALL_AT),
            history=[Step(now, by, "resolved", note)],
        )
        if done is None:
            return Outcome(f"#{alert.code} was already resolved.", await self._reread(alert))
        return Outcome(f"#{alert.code} resolved.", done, True)

    async def snooze(self, alert: Alert, duration: timedelta, by: str, now: datetime) -> Outcome:
        until = now + duration
        done = await self._store.change(
            alert.id,
            when_status=("open", "acknowledged", "snoozed"),
            set_={
                "status": "snoozed",
                "snoozed_until": until,
                "next_action": "wake",
                "next_escalation_at": until,
            },
            unset=(CALL_AT,),
            history=[Step(now, by, "snoozed", format_duration(duration))],
        )
        if done is None:
            current = await self._reread(alert)
            if current.status == "muted":
                return Outcome(f"#{alert.code} is muted; unmute it first.", current)
            return _already(current, now, self._tz)
        when = local_time(until, now, self._tz)
        text = f"#{alert.code} snoozed for {format_duration(duration)}, until {when}."
        return Outcome(text, done, True)

    async def mute(self, alert: Alert, duration: timedelta, by: str, now: datetime) -> Outcome:
        current = await self._reread(alert)
        if current.status == "resolved":
            return _already(current, now, self._tz)
        until = now + duration
        fields: AlertChanges = {
            "status": "muted",
            "muted_until": until,
            "next_action": "unmute",
            "next_escalation_at": until,
        }
        if current.status != "muted":  # a second mute extends; it keeps the first baseline
            fields["status_before_mute"] = current.status
            fields["count_at_mute"] = current.count
        done = await self._store.change(
            alert.id,
            when_status=(current.status,),
            set_=fields,
            unset=("snoozed_until", CALL_AT),
            history=[Step(now, by, "muted", format_duration(duration))],
        )
        if done is None:
            return Outcome(f"#{alert.code} changed just now; please try again.", current)
        when = local_time(until, now, self._tz)
        text = (
            f"#{alert.code} muted for {format_duration(duration)}, until {when}: "
            "repeats are counted, not sent."
        )
        return Outcome(text, done, True)

    async def unmute(self, alert: Alert, by: str, now: datetime, policy: RoutingPolicy) -> Outcome:
        current = await self._reread(alert)
        if current.status != "muted":
            return Outcome(f"#{alert.code} is not muted.", current)
        fields: AlertChanges = {"status": "acknowledged", **stop_timer()}
        if current.status_before_mute != "acknowledged":
            timer = escalation_after(current, now, policy, delivered=False)
            fields = {"status": "open", **timer}
        done = await self._store.change(
            alert.id,
            when_status=("muted",),
            set_=fields,
            unset=("muted_until", "status_before_mute", "count_at_mute"),
            history=[Step(now, by, "unmuted")],
        )
        if done is None:
            return _already(await self._reread(alert), now, self._tz)
        return Outcome(f"#{alert.code} unmuted.", done, True)


def escalation_after(
    alert: Alert, now: datetime, policy: RoutingPolicy, *, delivered: bool, pages: int = 0
) -> AlertChanges:
    """The next timer once an alert was sent (or unmuted): per severity, DESIGN.md. A
    warning's SMS waits ``warning_sms_after``; zero means it never goes by SMS.
    ``pages``: SMS pages of the round just sent, not yet counted on ``alert``."""
    severity, sms_rounds = alert.severity, alert.sms_rounds + pages
    if severity == "warning" and sms_rounds == 0:
        if not policy.warnings_page:
            return stop_timer()
        return {
            "next_action": "sms",
            "next_escalation_at": now + _at_least(policy.warning_sms_after),
        }
    if severity == "critical":
        rounds = sms_rounds + (1 if delivered else 0)
        if rounds < policy.critical_max_sms:
            at = now + _at_least(policy.critical_repeat_every)
            return {"next_action": "sms", "next_escalation_at": at}
    return stop_timer()


def _at_least(delay: timedelta) -> timedelta:
    """A zero delay from a bad override would make a timer fire in a tight loop."""
    return max(delay, timedelta(minutes=1))
