"""Sending an alert: one round (the first delivery or an escalation step), its chat
copies and its SMS page, through the outbox.

Each round goes through the ``Pager`` (chat copies and the SMS page), then is recorded
on the alert by the ``Sender`` in one conditional update that also arms the next
escalation timer. Every message goes under the key ``alert:<code>:<seq>:<channel>``,
so a step retried after a crash is not sent twice; SMS pages take one unit of the
hourly budget every SMS shares, and the owner hears once an hour when that budget is
used up. A round of a critical alert also arms its next phone call (``call_at``, in the
same update; ``agent.alerts.calls`` rings it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Literal, Protocol
from zoneinfo import ZoneInfo

from agent.alerts import policy as r
from agent.alerts.directives import format_duration
from agent.alerts.lifecycle import CALL_AT, escalation_after
from agent.alerts.policy import RoutingPolicy
from agent.config import Settings
from agent.owner import OwnerSettings
from agent.reach import Reach, Target
from channels.delivery.outbox import Outbox
from channels.registry import ChannelName
from channels.types import SMS_BUDGET_TAKEN, OutboundMessage
from storage.repos.alert_record import Alert, AlertChanges, Delivery, Step
from storage.repos.alerts import AlertStore

log = logging.getLogger(__name__)
Paged = Literal["sent", "budget", "unavailable", "failed"]


class NextCall(Protocol):
    """``Caller.next_call``: when this round's call rings, if it rings."""

    def __call__(self, alert: Alert, now: datetime, *, delivered: bool) -> datetime | None: ...


class Pager:
    def __init__(
        self,
        store: AlertStore,
        outbox: Outbox,
        reach: Reach,
        settings: Settings,
        sms_per_hour: Callable[[], int],
        owner: OwnerSettings | None = None,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._reach = reach
        self._settings = settings
        self._sms_per_hour = sms_per_hour
        self._owner = owner

    @property
    def tz(self) -> ZoneInfo:
        return self._owner.tz if self._owner is not None else self._settings.tz

    def chats(self) -> list[Target]:
        """The owner's chats, the primary channel first (``manage_settings``)."""
        primary = self._owner.current.primary_channel if self._owner is not None else None
        return self._reach.chats(primary)

    def sms_ready(self) -> bool:
        """Whether a page can go at all: the SMS channel runs and the owner has a number."""
        return self._reach.can_page()

    async def page(self, alert: Alert, now: datetime, seq: int, lead: str) -> Paged:
        """One SMS to the owner (on the channel that pages), within the hourly budget."""
        pager = self._reach.pager()
        if pager is None:
            return "unavailable"
        if not await self._store.take_sms(now, self._sms_per_hour()):
            log.warning("sms budget reached; alert #%s not paged", alert.code)
            await self._tell_budget(alert, now)
            return "budget"
        key = f"alert:{alert.code}:{seq}:{pager.channel}"
        meta = {"alert_code": alert.code, SMS_BUDGET_TAKEN: True}
        text = r.sms_text(alert, lead)
        await self._outbox.enqueue(
            OutboundMessage(pager.channel, pager.chat_id, text, key, meta=meta)
        )
        # A failed first try stays queued and is retried; a refusal (bad number, the
        # owner replied STOP) is final, and the page must reach a chat instead.
        status = await self._store.outbox_status(key)
        return "failed" if status == "failed" else "sent"

    async def _tell_budget(self, alert: Alert, now: datetime) -> None:
        if not await self._store.claim_budget_notice(now):
            return
        frees = await self._store.budget_frees_at()
        when = r.local_time(frees, now, self.tz) if frees else "within the hour"
        text = (
            f"SMS budget reached ({self._sms_per_hour()} per hour): #{alert.code} "
            f"{r.title_text(alert)} was not sent by SMS. SMS pages resume at {when}."
        )
        key = f"sms-budget:{now.isoformat()}"
        for target in self.chats():
            message = OutboundMessage(
                target.channel, target.chat_id, text, f"{key}:{target.channel}"
            )
            await self._outbox.enqueue(message)
            if await self._store.outbox_status(message.idempotency_key) == "sent":
                return

    async def send(self, target: Target, alert: Alert, seq: int, lead: str) -> bool:
        """Send the chat copy through the outbox; True once the channel accepted it."""
        key = f"alert:{alert.code}:{seq}:{target.channel}"
        message = OutboundMessage(
            target.channel,
            target.chat_id,
            r.chat_text(alert, lead),
            key,
            buttons=r.buttons(alert) if self._reach.delivery(target.channel).buttons else (),
            meta={"alert_code": alert.code},
        )
        await self._outbox.enqueue(message)
        return await self._store.outbox_status(key) == "sent"

    async def send_everywhere(self, alert: Alert, seq: int, lead: str) -> list[str]:
        """The chat copy on every chat channel; the channels that took it."""
        return [  # the SMS copy is the page, never a second SMS
            target.channel
            for target in self.chats()
            if not self._reach.delivery(target.channel).pages
            and await self.send(target, alert, seq, lead)
        ]

    async def send_first(self, alert: Alert, seq: int, lead: str) -> Target | None:
        """The first chat that takes the alert; copies that failed on the way stop retrying."""
        failed: list[str] = []
        for target in self.chats():
            if await self.send(target, alert, seq, lead):
                await self._store.supersede(failed, target.channel)
                return target
            log.warning("alert #%s: %s failed, trying the next channel", alert.code, target.channel)
            failed.append(f"alert:{alert.code}:{seq}:{target.channel}")
        return None


class Sender:
    def __init__(
        self,
        store: AlertStore,
        pager: Pager,
        policy: Callable[[], RoutingPolicy],
        next_call: NextCall | None = None,
    ) -> None:
        """``policy``: a getter, since the router loads its routing policy on start."""
        self._store = store
        self._pager = pager
        self._policy = policy
        self._next_call = next_call

    async def deliver(self, alert: Alert, now: datetime) -> None:
        """First delivery (or a reminder): critical everywhere, others to the first chat."""
        lead, seq = alert.lead or "", alert.seq
        sent: list[str] = []
        paged: Paged | None = None
        if alert.severity == "critical":
            paged = await self._pager.page(alert, now, seq, lead)
            sent = await self._pager.send_everywhere(alert, seq, lead)
        else:
            first = await self._pager.send_first(alert, seq, lead)
            if first is not None:
                sent.append(first.channel)
            elif alert.severity == "warning" and self._policy().warnings_page:
                paged = await self._pager.page(alert, now, seq, lead)
        await self._sent(alert, now, sent, paged, delivered=True)

    async def escalate(
        self, alert: Alert, now: datetime, lead: str = "", *, call: bool = True
    ) -> tuple[Paged, list[str]]:
        """Not acknowledged in time: page by SMS, or on every chat when SMS cannot go;
        ``call``: a critical alert rings too (not when the owner asked for the page)."""
        if not lead and alert.severity == "critical":
            rounds = alert.sms_rounds + 1
            lead = f"Page {rounds} of {self._policy().critical_max_sms}, not acknowledged."
        elif not lead:
            age = format_duration(now - (alert.delivered_at or alert.created_at))
            lead = f"Not acknowledged after {age}."
        seq = alert.seq
        paged = await self._pager.page(alert, now, seq, lead)
        sent: list[str] = []
        if paged != "sent":
            sent = await self._pager.send_everywhere(alert, seq, lead)
        await self._sent(alert, now, list(sent), paged, delivered=False, call=call)
        return paged, sent

    async def _sent(
        self,
        alert: Alert,
        now: datetime,
        sent: list[str],
        paged: Paged | None,
        *,
        delivered: bool,
        call: bool = True,
    ) -> None:
        """Record one round of sending and arm the next timer (and call)."""
        if paged == "sent":
            sent.append(ChannelName.SMS)
        pages = 1 if paged is not None else 0
        timer = escalation_after(alert, now, self._policy(), delivered=False, pages=pages)
        fields: AlertChanges = {
            "seq": alert.seq + 1,
            "held": False,
            "updated_at": now,
            "last_page": paged,
        }
        ring = self._next_call(alert, now, delivered=delivered) if self._next_call else None
        if call and ring is not None:
            fields[CALL_AT] = ring
        if sent:
            fields["last_sent_at"] = now
            if delivered and alert.delivered_at is None:
                fields["delivered_at"] = now
        detail = ", ".join(sent) if sent else "nowhere: no channel took it"
        if paged in ("budget", "unavailable", "failed"):
            detail += f"; sms {paged}"
        await self._store.change(
            alert.id,
            when_status=("open",),
            set_={**fields, **timer},
            unset=("lead",),
            inc={"sms_rounds": pages, "sms_sent": 1 if paged == "sent" else 0},
            history=[Step(now, "router", "sent" if delivered else "escalated", detail)],
            delivered=[Delivery(now, ch) for ch in sent],
        )
        if not sent:
            log.error("alert #%s reached no channel", alert.code)
