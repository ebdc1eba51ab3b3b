"""A test page: one test alert walked through the whole ladder as configured (every chat,
then one SMS, then one call) with short steps, so the owner knows the day before that a
page reaches them (``watchkeeper page-test``, the dashboard's button).

Rules:

1. A test alert is stored with ``test: true``, ``source: page-test`` and the open key
   ``page-test``: one test page at a time (a second one is refused, naming the first).
2. Its SMS and its call are outside the hourly SMS budget and the call cap: a test
   sends at most one SMS and rings at most one call whatever the budget and the cap
   say, and takes nothing from them, so the owner's allowance for real alerts is
   what it was.
3. The router never escalates it (no timer, no ``call_at``): this walker does, one
   step every ``step`` while nobody answers, and stops at once when the owner
   acknowledges (or snoozes, or resolves) it by any of the usual ways: a reply, the
   call's key, a button, the dashboard. Each step is written in the alert's history
   as it happens; Twilio's reports (SMS delivered, call completed, key pressed) land
   there too (``agent.alerts.calls``).
4. It ends resolved by ``page-test``, its last history step ``test page ended`` saying
   how it went: answered, or not within ``wait``. One left running by a process that
   stopped is ended at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from agent.alerts import policy as r
from agent.alerts.calls import Caller
from agent.alerts.lifecycle import CALL_AT
from agent.alerts.sending import Pager
from agent.config import Settings
from agent.reach import Reach, Target
from channels.delivery.outbox import Outbox
from channels.registry import ChannelName
from channels.types import SMS_BUDGET_TAKEN, SMS_STATUS_CALLBACK, OutboundMessage
from runtime.clock import Clock
from runtime.tasks import stop_task, wait_event
from storage.repos.alert_record import (
    UNRESOLVED,
    Alert,
    AlertChanges,
    Delivery,
    Step,
    stop_timer,
)
from storage.repos.alerts import AlertStore

log = logging.getLogger(__name__)
BY: Final = "page-test"
"""Who writes a test page's own steps (and its alert's ``source`` and open key)."""
ENDED: Final = "test page ended"
STARTED: Final = "test page started"
TITLE = "Test page"
BODY = (
    "Nothing is wrong: this checks that a page reaches you. "
    "Acknowledge it as you would a real alert."
)
LEAD = "TEST."
SPOKEN_LEAD = "This is a test page. "
STEP = timedelta(minutes=1)
WAIT = timedelta(minutes=5)
MOST_STEP = timedelta(minutes=10)
MOST_WAIT = timedelta(hours=1)
LOOK_EVERY = 1.0
"""Seconds between looks at the alert while waiting: an acknowledgement made by another
process is seen within this; one made here wakes the walker at once (``changed``)."""


class PageTestError(ValueError):
    """A test page that cannot start; the message says why."""


class PageTestRunning(PageTestError):
    """A test page is already running: ``code`` is its alert's."""

    def __init__(self, code: str) -> None:
        super().__init__(f"test page #{code} is still running; acknowledge it or wait for it")
        self.code = code


@dataclass(frozen=True)
class PageTestTimes:
    """How long each step waits for an answer before the next, and the whole test."""

    step: timedelta = STEP
    wait: timedelta = WAIT

    @classmethod
    def of(cls, step_seconds: Any = None, wait_seconds: Any = None) -> PageTestTimes:
        """From the API's numbers (None: the default); ``PageTestError`` names a bad one."""
        step = _seconds("step_seconds", step_seconds, STEP, MOST_STEP)
        wait = _seconds("wait_seconds", wait_seconds, WAIT, MOST_WAIT)
        if wait < timedelta(seconds=1):
            raise PageTestError("wait_seconds must be at least 1")
        return cls(step, wait)


def _seconds(name: str, value: Any, default: timedelta, most: timedelta) -> timedelta:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise PageTestError(f"{name} must be a number of seconds")
    if not 0 <= value <= most.total_seconds():
        raise PageTestError(f"{name} must be between 0 and {most.total_seconds():g}")
    return timedelta(seconds=value)


class PageTests:
    def __init__(
        self,
        store: AlertStore,
        pager: Pager,
        outbox: Outbox,
        caller: Caller,
        reach: Reach,
        settings: Settings,
        clock: Clock,
        tz: Callable[[], ZoneInfo],
    ) -> None:
        self._store = store
        self._pager = pager
        self._outbox = outbox
        self._caller = caller
        self._reach = reach
        self._settings = settings
        self._clock = clock
        self._tz = tz
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """End a test page a stopped process left running (its walker is gone)."""
        left = await self._store.by_open_key(BY)
        if left is not None:
            await self._end(left, "not finished: Watchkeeper stopped during it")

    async def stop(self) -> None:
        for task in list(self._tasks):
            await stop_task(task)

    def changed(self) -> None:
        """An alert changed here (an ack, a resolve): a waiting walker looks now."""
        self._changed.set()

    # -- starting ----------------------------------------------------------------------

    def ladder(self) -> list[tuple[str, str | None]]:
        """The steps a test page takes now, in order, each with why it is skipped (None:
        it goes): ``chat``, ``sms``, ``call``."""
        chats = [t.channel for t in self._chats()]
        chat = None if chats else "no chat channel reaches the owner"
        return [("chat", chat), ("sms", self._sms_off()), ("call", self._call_off())]

    async def begin(self, times: PageTestTimes | None = None) -> Alert:
        """Store a test alert and start walking it; ``PageTestRunning`` while one runs,
        ``PageTestError`` when no step could reach the owner."""
        times = times or PageTestTimes()
        ladder = self.ladder()
        if all(why is not None for _step, why in ladder):
            reasons = "; ".join(f"{step}: {why}" for step, why in ladder)
            raise PageTestError(f"nothing can page the owner ({reasons})")
        now = self._clock()
        code = await self._store.next_code()
        plan = ", ".join(step if why is None else f"{step} off ({why})" for step, why in ladder)
        alert = Alert(
            id=None,
            code=code,
            severity="critical",
            title=TITLE,
            status="open",
            created_at=now,
            body=BODY,
            source=BY,
            dedupe_key=BY,
            open_key=BY,
            updated_at=now,
            last_seen_at=now,
            history=(Step(now, BY, STARTED, plan),),
            test=True,
        )
        stored = await self._store.insert(alert)
        if stored is None:
            running = await self._store.by_open_key(BY)
            raise PageTestRunning(running.code if running is not None else "?")
        log.info("alert #%s: test page started (%s)", code, plan)
        task = asyncio.create_task(self._walk(stored, times), name=f"page-test-{code}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return stored

    # -- the walk ----------------------------------------------------------------------

    async def _walk(self, alert: Alert, times: PageTestTimes) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + times.wait.total_seconds()
        try:
            for step in (self._chat_step, self._sms_step, self._call_step):
                went = await step(alert)  # a step that did not go: the next one now
                until = min(deadline, loop.time() + _s(times.step)) if went else loop.time()
                if await self._answered(alert, until):
                    break
            else:  # every step taken: the owner has until the deadline
                await self._answered(alert, deadline)
            await self._end(alert, None, times.wait)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("alert #%s: the test page failed", alert.code)
            with contextlib.suppress(Exception):
                await self._end(alert, "stopped by an error in Watchkeeper (see its log)")

    async def _answered(self, alert: Alert, until: float) -> bool:
        """Whether the owner answered (the alert is no longer open) by ``until`` (loop
        time), looking at once on ``changed`` and every ``LOOK_EVERY`` otherwise."""
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            current = await self._store.by_code(alert.code)
            if current is None or current.status != "open":
                return True
            left = until - loop.time()
            if left <= 0:
                return False
            await wait_event(self._changed, min(left, LOOK_EVERY))

    def _chats(self) -> list[Target]:
        return [t for t in self._pager.chats() if not self._reach.delivery(t.channel).pages]

    async def _chat_step(self, alert: Alert) -> bool:
        """Every chat the owner has; True when at least one took it."""
        targets = self._chats()
        if not targets:
            await self._note(alert, "chat skipped", "no chat channel reaches the owner")
            return False
        took: list[str] = []
        for target in targets:
            if await self._pager.send(target, alert, 0, LEAD):
                took.append(target.channel)
                await self._note(alert, "chat sent", target.channel, sent=target.channel)
            else:
                row = await self._store.outbox_row(f"alert:{alert.code}:0:{target.channel}")
                await self._note(alert, "chat failed", f"{target.channel}: {_why(row.last_error)}")
        return bool(took)

    async def _sms_step(self, alert: Alert) -> bool:
        """One SMS, outside the hourly budget (rule 2); True when Twilio took it."""
        off = self._sms_off()
        pager = self._reach.pager()
        if off is not None or pager is None:
            await self._note(alert, "sms skipped", off or "SMS is not set up")
            return False
        key = f"alert:{alert.code}:test:{pager.channel}"
        meta: dict[str, Any] = {"alert_code": alert.code, SMS_BUDGET_TAKEN: True}
        if self._settings.public_base_url:  # where Twilio can tell us it was delivered
            meta[SMS_STATUS_CALLBACK] = self._caller.url(alert.code, "sms")
        text = r.sms_text(alert, LEAD)
        await self._outbox.enqueue(
            OutboundMessage(pager.channel, pager.chat_id, text, key, meta=meta)
        )
        row = await self._store.outbox_row(key)
        if row.status == "sent":
            await self._note(alert, "sms sent", f"to {_masked(pager.chat_id)}", sent=pager.channel)
            return True
        await self._note(alert, "sms failed", _why(row.last_error))
        return False

    async def _call_step(self, alert: Alert) -> bool:
        """One call, outside the call cap (rule 2); True when Twilio placed it."""
        off = self._call_off()
        phone = self._reach.address(ChannelName.SMS)
        if off is not None or phone is None:
            await self._note(alert, "call skipped", off or "OWNER_PHONE is not set")
            return False
        key = f"alert:{alert.code}:call:0"
        now = self._clock()
        await self._outbox.enqueue(self._caller.call_message(alert, phone, key, now, SPOKEN_LEAD))
        row = await self._store.outbox_row(key)
        await self._store.change(alert.id, inc={"calls": 1})
        if row.status == "sent":
            await self._note(alert, "call placed", f"ringing {_masked(phone)}")
            return True
        await self._note(alert, "call failed", _why(row.last_error))
        return False

    def _sms_off(self) -> str | None:
        s = self._settings
        if not (s.twilio_account_sid and s.twilio_auth_token and s.twilio_from_number):
            return "Twilio is not set up"
        if not s.owner_phone:
            return "OWNER_PHONE is not set"
        if not self._reach.can_page():
            return "the SMS channel is not running"
        return None

    def _call_off(self) -> str | None:
        return self._caller.off_reason()

    async def _note(
        self, alert: Alert, action: str, detail: str | None, *, sent: str | None = None
    ) -> None:
        """One step in the history; ``sent``: a channel that took it (a plain "ack" on
        it then answers this alert, as for any alert)."""
        now = self._clock()
        fields: AlertChanges = {"updated_at": now}
        if sent is not None:
            fields["last_sent_at"] = now
            if alert.delivered_at is None:
                fields["delivered_at"] = now
        await self._store.change(
            alert.id,
            set_=fields,
            history=[Step(now, BY, action, detail)],
            delivered=[Delivery(now, sent)] if sent is not None else (),
        )

    async def _end(self, alert: Alert, why: str | None, wait: timedelta = WAIT) -> None:
        """Resolve it (rule 4), its last step saying how it went."""
        now = self._clock()
        current = await self._store.by_code(alert.code) or alert
        if why is None:
            why = answer_words(current) or f"not acknowledged within {_duration(wait)}"
        step = Step(now, BY, ENDED, why)
        if current.status in UNRESOLVED:
            done = await self._store.change(
                current.id,
                when_status=UNRESOLVED,
                set_={"status": "resolved", "resolved_at": now, "resolved_by": BY, **stop_timer()},
                unset=("open_key", "snoozed_until", "muted_until", CALL_AT),
                history=[step],
            )
            if done is not None:
                return
        await self._store.change(current.id, unset=("open_key",), history=[step])


def answer_words(alert: Alert) -> str | None:
    """How the owner answered a test page (``acknowledged by telegram reply``); None
    when nobody did."""
    for step in reversed(alert.history):
        if step.by != BY and step.action in ("acknowledged", "resolved", "snoozed", "muted"):
            return f"{step.action} by {by_words(step.by)}"
    return None


def by_words(by: str) -> str:
    """``owner via telegram`` -> ``telegram reply``; ``owner via call`` -> ``call key
    press``; ``owner via telegram button`` -> ``telegram button``."""
    if by == "owner via call":
        return "call key press"
    if by.startswith("owner via "):
        channel, _, kind = by.removeprefix("owner via ").partition(" ")
        return f"{channel} {kind or 'reply'}"
    return by


def _s(delay: timedelta) -> float:
    return delay.total_seconds()


def _duration(delay: timedelta) -> str:
    seconds = int(delay.total_seconds())
    return f"{seconds // 60} min" if seconds % 60 == 0 and seconds else f"{seconds} s"


def _why(error: str | None) -> str:
    return error or "not sent yet (the outbox keeps trying)"


def _masked(number: str) -> str:
    """A phone number with its middle hidden: the CLI's output may be pasted somewhere."""
    return number if len(number) < 7 else f"{number[:3]}…{number[-4:]}"


# -- progress, as the API and the CLI show it ------------------------------------------

FAILED = frozenset({"chat failed", "sms failed", "sms undelivered", "call failed"})
"""Steps that mean a configured part of the ladder did not work."""


def progress(alert: Alert, tz: ZoneInfo) -> dict[str, Any]:
    """``GET /api/page-test/{code}``: each step so far (ISO time, the owner's local
    ``HH:MM:SS``, a line of words), whether it is done and how it went."""
    steps = []
    for step in alert.history:
        if step.action == "raised":
            continue
        steps.append(
            {
                "at": step.at.isoformat(),
                "time": step.at.astimezone(tz).strftime("%H:%M:%S"),
                "action": step.action,
                "line": step_line(step),
            }
        )
    done = any(step.action == ENDED for step in alert.history)
    answered = answer_words(alert)
    failed = [step_line(s) for s in alert.history if s.action in FAILED]
    return {
        "code": alert.code,
        "test": True,
        "status": alert.status,
        "done": done,
        "answered": answered,
        "failed": failed,
        "steps": steps,
    }


LINES: Mapping[str, str] = {
    STARTED: "started: {detail}",
    "chat sent": "chat: sent on {detail}",
    "chat failed": "chat: FAILED on {detail}",
    "chat skipped": "chat: skipped ({detail})",
    "sms sent": "sms: sent {detail}",
    "sms failed": "sms: FAILED ({detail})",
    "sms skipped": "sms: skipped ({detail})",
    "sms delivered": "sms: delivered (Twilio says so)",
    "sms undelivered": "sms: NOT delivered (Twilio says so)",
    "call placed": "call: {detail}",
    "call failed": "call: FAILED ({detail})",
    "call skipped": "call: skipped ({detail})",
    "call completed": "call: answered and ended",
    "call no-answer": "call: not answered",
    "call busy": "call: busy",
    "key pressed": "call: key {detail}",
    ENDED: "ended: {detail}",
}


def step_line(step: Step) -> str:
    """One history step of a test page in words, for a terminal at 3 a.m."""
    detail = step.detail or ""
    if step.action == "key pressed":
        detail = detail.split(" ", 1)[0] + " pressed"
    if step.action in ("acknowledged", "resolved", "snoozed", "muted") and step.by != BY:
        return f"{step.action} by {by_words(step.by)}"
    shape = LINES.get(step.action)
    if shape is None:
        return f"{step.action}: {detail}" if detail else step.action
    return shape.format(detail=detail)
