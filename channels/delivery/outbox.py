"""The outbox: every reply is stored with an idempotency key, then sent with retries.

A reply is claimed atomically (``pending`` -> ``sending``) before it is sent, so
the fast path (send right after enqueue) and the retry loop never send it twice.
One that finally fails stays in the collection as ``failed`` with its error and
is reported; nothing is dropped silently. Under load, replies stored before their
send share one command (``storage.coalesce``).

Due messages (retries, and what was queued to send later) go chat by chat: each chat's
in the order they were queued, one at a time, claimed only when it is its turn; chats
side by side, so a chat waiting for its channel's pace (a second per Telegram chat, a
group's minute, a ``retry_after``) holds up no other (``run_due``).

A send's outcome is recorded at once, by its own write: the window in which a crash
can leave a reply sent but not recorded (so sent again after the restart) is that one
local write, never a batch waiting for company (on the embedded server it may queue
behind the command that holds its one connection, ``storage.db.EMBEDDED_POOL``).
Telegram gives no way to ask whether a message arrived, so that window (and a send
still on its way at the crash) cannot be closed: a reply left ``sending`` by a dead
process is sent again, a reply lost being worse than one seen twice (the README's
"Nothing lost, nothing doubled" says so).

What is stored, and how, is the store's (``storage.repos.outbox``): here every row is an
``OutboxRow``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, NamedTuple

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.delivery.text import clean_text, clean_value
from channels.types import Button, Channel, OutboundMessage, SendError, SendResult
from runtime.backoff import Backoff
from runtime.clock import Clock
from runtime.tasks import stop_task, wait_event
from storage.repos.outbox import Backlog, OutboxStore
from storage.repos.outbox_row import OutboxRow

log = logging.getLogger(__name__)
FailureHook = Callable[[OutboxRow], Awaitable[None]]
"""Told of a reply given up on, with its row as stored (``failed``, its last error)."""
SEND_BACKOFF = Backoff(first=1.0, factor=4.0, cap=300.0, retries=5)
"""Waits after a failed send (1, 4, 16, 64, 256 s; longer when the service asks), and
5 retries before a reply is marked failed and reported."""
STALE_SENDING = timedelta(minutes=2)
"""Longer than a send can wait for its channel's pace (a Telegram group's minute)."""
DUE_SCAN = 1000
"""Due rows looked at to find the chats with something due, per pass."""
MAX_LANES = 64
"""Chats drained at once; the rest are taken up as these finish."""
Lane = tuple[str, str]
"""A chat's due messages: its channel and chat id."""
RECOVER_EVERY = STALE_SENDING.total_seconds() / 4


class Failure(NamedTuple):
    """A send that did not go through: why, and whether (and when) to try again."""

    error: str
    retryable: bool
    retry_after: float | None = None


def to_message(row: OutboxRow) -> OutboundMessage:
    """The message a stored row holds (one the retry loop claimed)."""
    return OutboundMessage(
        channel=row.channel,
        chat_id=row.chat_id,
        text=row.text,
        idempotency_key=row.idempotency_key,
        reply_to=row.reply_to,
        buttons=tuple(Button(label, data) for label, data in row.buttons),
        meta=dict(row.meta),
    )


class Outbox:
    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        channels: Mapping[str, Channel],
        clock: Clock,
        backoff: Backoff = SEND_BACKOFF,
        on_failure: FailureHook | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        self._store = OutboxStore(db)
        self._channels = channels
        self._clock = clock
        self._backoff = backoff
        self._on_failure = on_failure
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lanes: dict[Lane, asyncio.Task[int]] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    async def enqueue(self, message: OutboundMessage, *, send_now: bool = True) -> bool:
        """Store ``message``; False when its idempotency key was already stored."""
        message, row = self._storable(message, send_now=send_now)
        try:
            # Together with replies stored meanwhile (storage.coalesce); retried once
            # on a dropped connection, a retry meeting its own copy (same _id) is success.
            await self._store.add(row)
        except DuplicateKeyError:
            return False
        if send_now:  # sent here, stored as claimed: the send is the next step
            try:
                outcome: SendResult | Failure = await self._channel(message).send(message)
            except Exception as exc:
                outcome = _failure(message, exc)
            await self._settle(row, outcome)
        else:
            self._wake.set()
        return True

    async def send_then_record(self, message: OutboundMessage) -> None:
        """Send ``message`` first, then store it as sent: one write instead of two, and
        none before the send.

        Only for a message its sender can produce again, unchanged and without side
        effects, if the process dies before it is recorded: the agent's answer, which
        is stored in the conversation before it is sent (a replay reads it back,
        ``MessageRepo.answer_for``). The window for a second copy after a crash is the
        same as ``enqueue``'s: the one write after the send. A failed send is stored as
        ``enqueue`` would have left it: due again later, or failed and reported.
        """
        message, row = self._storable(message, send_now=True)
        outcome: SendResult | Failure
        try:
            outcome = await self._channel(message).send(message)
        except Exception as exc:
            outcome = _failure(message, exc)
        delay: float | None = None
        if isinstance(outcome, Failure):
            row, delay = self._after_failure(row, outcome)
        else:
            row = self._sent(row, outcome)
        # One insert of its own, at once (the module docstring).
        [error] = await self._store.record(row) or [None]
        if isinstance(error, DuplicateKeyError):  # only a second process on the message
            log.warning("outbox %s was recorded twice", row.idempotency_key)
            return
        if error is not None:
            raise error
        if isinstance(outcome, Failure):
            await self._failure_noted(row, outcome, delay)

    def _storable(
        self, message: OutboundMessage, *, send_now: bool
    ) -> tuple[OutboundMessage, OutboxRow]:
        """``message`` as it is sent and its row as it is stored: both with U+FFFD for
        text that cannot be encoded (it could be neither stored nor sent)."""
        message = dataclasses.replace(
            message,
            chat_id=clean_text(message.chat_id),
            text=clean_text(message.text),
            buttons=tuple(Button(clean_text(b.label), clean_text(b.data)) for b in message.buttons),
            meta=clean_value(message.meta),
        )
        now = self._clock()
        return message, OutboxRow(
            # Its own key: the same message enqueued again meets it (storage.collections).
            idempotency_key=message.idempotency_key,
            channel=message.channel,
            chat_id=message.chat_id,
            text=message.text,
            reply_to=message.reply_to,
            buttons=tuple((b.label, b.data) for b in message.buttons),
            meta=message.meta,
            # Stored already claimed when sending right away: one write fewer, and a
            # crash before the send leaves it "sending", which recover() re-queues.
            status="sending" if send_now else "pending",
            claimed_at=now,
            attempts=1 if send_now else 0,
            created_at=now,
            next_attempt_at=now,
        )

    async def _send_claimed(self, row: OutboxRow) -> None:
        """Send a claimed row (``enqueue`` sends what it stored itself)."""
        message = to_message(row)
        outcome: SendResult | Failure
        try:
            outcome = await self._channel(message).send(message)
        except Exception as exc:
            outcome = _failure(message, exc)
        await self._settle(row, outcome)

    async def _settle(self, row: OutboxRow, outcome: SendResult | Failure) -> None:
        """Record a claimed row's send: sent, or due again later, or failed."""
        if isinstance(outcome, Failure):
            row, delay = self._after_failure(row, outcome)
            await self._store.settle(row)
            await self._failure_noted(row, outcome, delay)
            return
        # Its own command, at once (the module docstring).
        await self._store.settle(self._sent(row, outcome))

    def _channel(self, message: OutboundMessage) -> Channel:
        """The running channel ``message`` goes through (a retryable ``SendError`` if
        none: it may be starting or stopping)."""
        channel = self._channels.get(message.channel)
        if channel is None:
            raise SendError(f"channel {message.channel!r} is not running", retryable=True)
        return channel

    def _sent(self, row: OutboxRow, result: SendResult) -> OutboxRow:
        """``row`` as a successful send leaves it."""
        now = self._clock()
        return replace(
            row,
            status="sent",
            sent_at=now,
            # No attempt is due any more: the (status, next_attempt_at) index then also
            # finds what was sent recently (storage.repos.sent_alerts.last_sent_alert).
            next_attempt_at=now,
            external_ids=tuple(result.external_ids),
            info={**row.info, **result.info},
        )

    def _after_failure(self, row: OutboxRow, failure: Failure) -> tuple[OutboxRow, float | None]:
        """``row`` as a failed attempt leaves it, and the delay before the next (None:
        the last attempt failed)."""
        if failure.retryable and self._backoff.allows(row.attempts):
            delay = self._backoff.wait(row.attempts, failure.retry_after)
            due = self._clock() + timedelta(seconds=delay)
            return replace(
                row, status="pending", last_error=failure.error, next_attempt_at=due
            ), delay
        return replace(
            row, status="failed", last_error=failure.error, failed_at=self._clock()
        ), None

    async def _failure_noted(self, row: OutboxRow, failure: Failure, delay: float | None) -> None:
        """Log a stored failure (``row`` as stored); wake the retry loop when it is due,
        or report the loss."""
        attempts, error = row.attempts, failure.error
        if delay is not None:
            log.warning("send to %s failed (attempt %d): %s", row.channel, attempts, error)
            self._wake_in(delay)
            return
        log.error("giving up on a %s message after %d attempts: %s", row.channel, attempts, error)
        if self._on_failure is not None:
            try:
                await self._on_failure(row)
            except Exception:
                log.exception("failure hook raised")

    async def run_due(self) -> int:
        """Send every message that is due now, each chat's in order and chats side by
        side; returns how many were attempted. Raises what a chat's sending raised (the
        database failing), once every chat has had its go."""
        attempted = 0
        while lanes := await self._open_lanes():
            await asyncio.wait(lanes)
            for lane in lanes:
                if lane.cancelled():
                    continue
                error = lane.exception()
                if error is not None:
                    raise error
                attempted += lane.result()
        return attempted

    async def _open_lanes(self) -> list[asyncio.Task[int]]:
        """A draining task for each chat with something due (the one already at work, if
        any), oldest first, at most ``MAX_LANES`` at once."""
        chats = await self._store.due_chats(self._clock(), DUE_SCAN)
        for lane in chats:
            if lane not in self._lanes and len(self._lanes) < MAX_LANES:
                task = asyncio.create_task(self._drain(lane), name=f"outbox:{lane[0]}")
                task.add_done_callback(_logged)
                self._lanes[lane] = task
        found = [task for lane, task in self._lanes.items() if lane in chats]
        # Every lane busy with chats that have nothing more due: wait for them to free up.
        return found or (list(self._lanes.values()) if chats else [])

    async def _drain(self, lane: Lane) -> int:
        """Send one chat's due messages, oldest first, each claimed when its turn comes."""
        attempted = 0
        try:
            while True:
                row = await self._store.claim(lane, self._clock())
                if row is None:
                    return attempted
                attempted += 1
                await self._send_claimed(row)
        finally:
            if self._lanes.pop(lane, None) is not None and len(self._lanes) == MAX_LANES - 1:
                self._wake.set()  # chats may be waiting for a free lane

    def _wake_in(self, delay: float) -> None:
        """Wake the retry loop when a retry falls due, not at the next poll."""
        if self._task is None:
            return

        def fire() -> None:
            self._timers.discard(handle)
            self._wake.set()

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    async def recover(self, *, all_sending: bool = False) -> None:
        """Messages left ``sending`` by a process that died go back to ``pending``.

        With ``all_sending`` (this process owns the database, so nobody else can be
        mid-send) they go back at once; otherwise only after ``STALE_SENDING``, since
        another instance on the same MongoDB may still be sending them.
        """
        await self._store.requeue_sending(None if all_sending else self._clock() - STALE_SENDING)

    async def start(self, *, sole_owner: bool = False) -> None:
        await self.recover(all_sending=sole_owner)
        self._task = asyncio.create_task(self._run(), name="outbox")

    async def stop(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await stop_task(self._task)
        self._task = None
        # All at once, each within the grace: a send cut short stays "sending" (recovered).
        await asyncio.gather(*(stop_task(lane) for lane in list(self._lanes.values())))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        recovered_at = loop.time()  # start() has just recovered
        while True:
            try:
                # Claims go stale only after STALE_SENDING: looking a few times per
                # window is enough, and spares the database a write on every tick.
                if loop.time() - recovered_at >= RECOVER_EVERY:
                    await self.recover()
                    recovered_at = loop.time()
                await self._open_lanes()  # they drain on their own; new chats join meanwhile
            except Exception:
                log.exception("outbox loop error")
            self._wake.clear()
            await wait_event(self._wake, self._poll)

    async def has(self, idempotency_key: str) -> bool:
        """Whether a message with this key was ever enqueued (its ``_id``)."""
        return await self._store.has(idempotency_key)

    async def stored(self, idempotency_key: str) -> OutboxRow | None:
        """The message enqueued under this key (its chat and text), or None."""
        return await self._store.get(idempotency_key)

    async def pending_count(self) -> int:
        """Replies waiting for their send or in it."""
        return await self._store.unsent_count()

    async def backlog(self) -> Backlog:
        """Replies unsent and given up on, and when the oldest unsent was queued."""
        return await self._store.backlog()

    async def failed(self, limit: int = 20) -> list[OutboxRow]:
        """The replies given up on (at most ``limit``); a damaged row is logged and skipped."""
        return await self._store.failed(limit)


def _logged(task: asyncio.Task[int]) -> None:
    """Retrieve a draining task's failure (``run_due`` re-raises it to its caller; the
    loop's own are logged here), so none goes unseen."""
    if not task.cancelled() and task.exception() is not None:
        log.error("sending due outbox messages failed", exc_info=task.exception())


def _failure(message: OutboundMessage, exc: Exception) -> Failure:
    """What a send that raised ``exc`` leaves: a ``SendError`` as it says, anything
    else retryable, and logged (the outbox never raises a send's error)."""
    if isinstance(exc, SendError):
        return Failure(str(exc), exc.retryable, exc.retry_after)
    log.exception("unexpected error sending outbox %s", message.idempotency_key)
    return Failure(type(exc).__name__, True)
