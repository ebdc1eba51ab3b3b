"""Phone calls for critical alerts: when one rings, what it says, what a key press does.

A critical alert not acknowledged ``ALERT_CALL_AFTER_MINUTES`` after it was delivered
rings ``OWNER_PHONE`` (0: with the first SMS); each later SMS page rings again. The call
says the alert and gathers one key: 4 acknowledges, 6 resolves, 1 repeats (PagerDuty's
keys). Guarantees:

1. A call is stored before it rings: it rides the outbox as an SMS-channel message with
   ``VOICE_CALL`` under ``alert:<code>:call:<n>`` (``n``: the alert's calls so far), so
   a restart between storing and recording it finds the key and never rings twice.
2. At most ``CALLS_PER_HOUR`` calls to the owner's phone in any hour (GoAlert's "one
   call per contact method" spirit), however many alerts and processes there are.
3. A key press finds its alert by the code in the ``<Gather>`` action's query, never by
   the call: a press on an old call acts on the alert it announced.
4. A key press or call status is applied once: ``<CallSid>:<what>`` is noted on the
   alert in the same update that records it; a replayed webhook is answered, not applied.
5. A call Twilio refuses, or one skipped (switched off, the hourly cap), is written in
   the alert's history; the SMS escalation beside it carries on unchanged.

The same webhook takes an SMS page's delivery report (``event=sms``, asked for by a
test page: ``agent.alerts.page_test``), written in the history once like a call status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from agent.alerts import policy as r
from agent.alerts.directives import Ack, Directive, Resolve
from agent.alerts.lifecycle import CALL_AT, Outcome
from agent.config import Settings
from agent.reach import Reach, Target
from channels.delivery.outbox import Outbox
from channels.registry import ChannelName
from channels.types import VOICE_CALL, OutboundMessage
from storage.repos.alert_record import Alert, Step
from storage.repos.alerts import AlertStore

log = logging.getLogger(__name__)
Apply = Callable[[str, Directive, str], Awaitable[Outcome]]

VOICE_WEBHOOK = "/webhooks/twilio/voice"
CALLS_PER_HOUR = 3
RING_WINDOW = timedelta(minutes=10)
"""A call the outbox could not place within this long is dropped: by then it is stale."""
GATHER_SECONDS = 10
KEYS: Mapping[str, Directive] = {"4": Ack(), "6": Resolve()}
REPEAT_KEY = "1"
CALL_STATUSES = frozenset({"completed", "busy", "no-answer", "failed", "canceled"})
"""Final call states Twilio's status callback reports; each goes in the alert's history."""
SMS_STATUSES = frozenset({"delivered", "undelivered", "failed"})
"""Final SMS states a delivery report (``event=sms``) writes in the alert's history."""
BY = "owner via call"
XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>'


@dataclass(frozen=True)
class CallsStatus:
    """Whether critical alerts ring the owner, and why not (``/status``, the overview)."""

    off_because: str | None
    """Why no call can ring; None: calls are on."""
    after_minutes: float = 0
    per_hour: int = CALLS_PER_HOUR

    @property
    def on(self) -> bool:
        return self.off_because is None

    def to_json(self) -> dict[str, Any]:
        """The ``calls`` object of ``GET /api/status``."""
        if not self.on:
            return {"on": False, "off_because": self.off_because}
        return {"on": True, "after_minutes": self.after_minutes, "per_hour": self.per_hour}

    def words(self) -> str:
        """``calls after 5 min`` or ``calls off: <why>``."""
        return (
            f"calls after {self.after_minutes:g} min"
            if self.on
            else f"calls off: {self.off_because}"
        )


def calls_off_reason(settings: Settings) -> str | None:
    """Why critical alerts cannot ring the owner from these settings; None: they can."""
    if settings.twilio_voice_calls == "off":
        return "TWILIO_VOICE_CALLS=off"
    twilio = (settings.twilio_account_sid, settings.twilio_auth_token, settings.twilio_from_number)
    if not all(twilio):
        return "Twilio is not set up (TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, TWILIO_FROM_NUMBER)"
    if not settings.owner_phone:
        return "OWNER_PHONE is not set"
    if not settings.public_base_url:
        return "PUBLIC_BASE_URL is not set (a key press could not be checked)"
    return None


def _say(text: str) -> str:
    # xml.sax (six modules) loads with the first call placed: most agents place none.
    from xml.sax.saxutils import escape

    return f"<Say>{escape(text)}</Say>"


def _response(*verbs: str) -> str:
    return f"{XML_HEAD}<Response>{''.join(verbs)}</Response>"


def _spoken(text: str, code: str) -> str:
    """A chat confirmation said aloud: ``#12`` reads badly, "Alert 12" does not."""
    return text.replace(f"#{code}", f"Alert {code}")


class Caller:
    def __init__(
        self,
        store: AlertStore,
        outbox: Outbox,
        reach: Reach,
        settings: Settings,
        clock: Callable[[], datetime],
        apply: Apply,
        chats: Callable[[], list[Target]],
    ) -> None:
        """``apply``: the router's ack/resolve by code; ``chats``: the owner's chats, the
        primary first, where a key press is confirmed."""
        self._store = store
        self._outbox = outbox
        self._reach = reach
        self._settings = settings
        self._clock = clock
        self._apply = apply
        self._chats = chats
        public = settings.public_base_url or ""
        self._webhook = public.rstrip("/") + VOICE_WEBHOOK

    @property
    def call_after(self) -> timedelta:
        return timedelta(minutes=self._settings.alert_call_after_minutes)

    def off_reason(self) -> str | None:
        """Why no call can ring now (settings, or the Twilio channel not running)."""
        reason = calls_off_reason(self._settings)
        if reason is None and ChannelName.SMS not in self._reach.running:
            return "the Twilio (SMS) channel is not running"
        return reason

    def status(self) -> CallsStatus:
        """For ``/status`` and ``GET /api/status``: whether calls are on, or why not."""
        reason = self.off_reason()
        if reason is not None:
            return CallsStatus(reason)
        return CallsStatus(None, self._settings.alert_call_after_minutes)

    # -- when -------------------------------------------------------------------------

    def next_call(self, alert: Alert, now: datetime, *, delivered: bool) -> datetime | None:
        """When a round of sending (``delivered``: the first of an escalation) rings next:
        a delivery arms a call ``call_after`` on; a later page rings with it, unless the
        delivery's call is still to come. None: this alert never rings."""
        if alert.severity != "critical" or self.off_reason() is not None:
            return None
        if delivered:
            return now + self.call_after
        armed = alert.call_at
        return armed if armed is not None and armed > now else now

    async def ring_due(self, now: datetime) -> int:
        """Place every call due at ``now``; returns how many alerts were looked at."""
        done = 0
        while (alert := await self._store.claim_call(now)) is not None:
            done += 1
            try:
                await self._ring(alert, now)
            except Exception:  # the lease makes it due again in a few minutes
                log.exception("alert #%s: the call step failed", alert.code)
        return done

    async def _ring(self, alert: Alert, now: datetime) -> None:
        code, before = alert.code, alert.calls
        key = f"alert:{code}:call:{before}"
        phone = self._reach.address(ChannelName.SMS)
        stored = await self._outbox.has(key)  # a restart after storing it: never again
        if not stored:
            reason = self.off_reason()
            # OWNER_PHONE is set when there is no reason (calls_off_reason)
            if reason is None and not await self._store.take_call(phone or "", now, CALLS_PER_HOUR):
                reason = f"{CALLS_PER_HOUR} calls in the last hour already"
            if reason is not None or phone is None:
                await self._store.change(
                    alert.id,
                    unset=(CALL_AT,),
                    history=[Step(now, "router", "call skipped", reason)],
                )
                return
            await self._outbox.enqueue(self.call_message(alert, phone, key, now))
        row = await self._store.outbox_row(key)
        status, error = row.status, row.last_error
        if status == "sent":
            action, detail = "called", f"call {before + 1} to OWNER_PHONE"
        elif status == "failed":
            action, detail = "call failed", f"Twilio refused it: {error}"
        elif error:  # the outbox tries again within RING_WINDOW
            action, detail = "call failed", f"Twilio refused it for now ({error}); retrying"
        else:  # stored by a process that stopped before it was sent: the outbox sends it
            action, detail = "call queued", "in the outbox"
        if action == "call failed":
            log.warning("alert #%s: %s", code, detail)
        await self._store.change(
            alert.id,
            unset=(CALL_AT,),
            inc={"calls": 1},
            history=[Step(now, "router", action, detail)],
        )

    def call_message(
        self, alert: Alert, phone: str, key: str, now: datetime, lead: str = ""
    ) -> OutboundMessage:
        """The call that announces ``alert`` (``lead`` said first), for the outbox under
        ``key``; its status comes back to the voice webhook."""
        code = alert.code
        call = {
            "status_callback": self.url(code, "status"),
            "ring_until": (now + RING_WINDOW).isoformat(),
        }
        meta = {"alert_code": code, VOICE_CALL: call}
        return OutboundMessage(ChannelName.SMS, phone, self.twiml(alert, lead), key, meta=meta)

    # -- what the call says ----------------------------------------------------------

    def url(self, code: str, event: str) -> str:
        """The voice webhook's address for ``event`` (``key``, ``status``, ``sms``) of
        the alert ``code``: a Twilio callback names its alert in the query."""
        return f"{self._webhook}?{urlencode({'alert': code, 'event': event})}"

    def twiml(self, alert: Alert, lead: str = "") -> str:
        """The alert said plainly (severity, title, code) and one key gathered."""
        from xml.sax.saxutils import quoteattr  # see ``_say``

        code = alert.code
        label = r.LABELS[alert.severity].capitalize()
        text = (
            f"{lead}Watchkeeper. {label} alert {code}: {alert.title}. "
            "Press 4 to acknowledge, 6 to resolve, 1 to repeat."
        )
        gather = (
            f'<Gather numDigits="1" timeout="{GATHER_SECONDS}" method="POST" '
            f"action={quoteattr(self.url(code, 'key'))}>{_say(text)}</Gather>"
        )
        return _response(gather, _say(f"No key pressed. Alert {code} stays open. Goodbye."))

    # -- the webhook -------------------------------------------------------------------

    async def answer(self, query: Mapping[str, str], form: Mapping[str, str]) -> str:
        """A signed ``POST /webhooks/twilio/voice``: a key press (``event=key``) or a call
        status (``event=status``) for the alert named in the query; the TwiML answer."""
        code = query.get("alert", "").strip().lstrip("#")[:20]
        alert = await self._store.by_code(code) if code else None
        if query.get("event") == "status":
            if alert is not None:
                await self._call_status(alert, form)
            return _response()
        if query.get("event") == "sms":
            if alert is not None:
                await self._sms_status(alert, form)
            return _response()
        if not code:
            return _response(_say("This call names no alert. Goodbye."))
        if alert is None:
            return _response(_say(f"Watchkeeper has no alert {code}. Goodbye."))
        digit = form.get("Digits", "")[:1]
        if digit == REPEAT_KEY:
            return self.twiml(alert)
        directive = KEYS.get(digit)
        if directive is None:
            return self.twiml(alert, "That key does nothing. ")
        return await self._key(alert, digit, directive, form.get("CallSid", "")[:64])

    async def _key(self, alert: Alert, digit: str, directive: Directive, call_sid: str) -> str:
        code, now = alert.code, self._clock()
        event = f"{call_sid}:{digit}"
        heard = Step(now, "twilio", "key pressed", f"{digit} on call {call_sid}")
        if not await self._store.note_call_event(alert.id, event, [heard]):
            current = await self._store.by_code(code) or alert
            said = f"Alert {code} is {current.status}. Goodbye."
            return _response(_say(said))
        outcome = await self._apply(code, directive, BY)
        await self._confirm(outcome.text, code, event)
        return _response(_say(f"{_spoken(outcome.text, code)} Goodbye."))

    async def _confirm(self, text: str, code: str, event: str) -> None:
        """The key press confirmed in the owner's main chat, once per press."""
        for target in self._chats():
            message = OutboundMessage(
                target.channel,
                target.chat_id,
                f"By phone: {text}",
                f"call-key:{event}:{target.channel}",
                meta={"alert_code": code},
            )
            await self._outbox.enqueue(message)
            if await self._store.outbox_status(message.idempotency_key) == "sent":
                return

    async def _sms_status(self, alert: Alert, form: Mapping[str, str]) -> None:
        """An SMS page's delivery report (``MessageStatus``), once in the history."""
        status, sid = form.get("MessageStatus", ""), form.get("MessageSid", "")[:64]
        if status not in SMS_STATUSES:
            return
        line = Step(self._clock(), "twilio", f"sms {status}", f"message {sid}")
        if await self._store.note_call_event(alert.id, f"{sid}:{status}", [line]):
            log.info("alert #%s: sms %s", alert.code, status)

    async def _call_status(self, alert: Alert, form: Mapping[str, str]) -> None:
        status, sid = form.get("CallStatus", ""), form.get("CallSid", "")[:64]
        if status not in CALL_STATUSES:
            return
        now = self._clock()
        line = Step(now, "twilio", f"call {status}", f"call {sid}")
        if await self._store.note_call_event(alert.id, f"{sid}:{status}", [line]):
            log.info("alert #%s: call %s", alert.code, status)
