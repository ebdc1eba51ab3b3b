"""How model calls are paced: an adaptive limit on calls in flight, one per provider
(AIMD), and a burst's requests built one at a time (``Turns``).

The limit starts at its ceiling (``MAX_CONCURRENT_MODEL_CALLS``): a burst of chats
is answered at once. When the provider says it is overloaded (HTTP 429, 503, 529)
the limit is halved, at most once per round of calls (calls already in flight when
it was halved do not halve it again), and a ``Retry-After`` pauses every new call to
that provider until then (at most ``max_pause``). Each ``grow_after`` successes add
one back, up to the ceiling. Callers wait their turn in order; nobody is turned away.

Time is counted in integer nanoseconds of a monotonic clock (``time.monotonic_ns`` unless
one is given), so a pause is exactly as long as it was asked to be, however long the
machine has been up. The loop's timer only says when to look again: a timer that fires
a little before the clock reaches the end (the loop's clock is coarser) looks again
later instead of letting a call through early.

Retrying is not done here: ``agent.llm.resilient`` decides whether and when a failed
call is tried again, and takes its turn here again like any other call.

Requests built in turn (``Turns``): model requests leave in the order they were asked
for, each as soon as it is built.

Under a burst, many exchanges reach their model call at once: one database command
(the inbox write, opening the conversations) releases them together. Each then spends
CPU building its request before it waits for a connection. Left to the event
loop, every exchange builds before any request is written: they all leave together at
the end, their answers come back together, and storing and sending a hundred answers
queue up behind each other after the last one arrives.

``Turns.run`` builds one request at a time: it starts the call and holds the turn
until the call first waits (for its connection, usually), then hands it on. A request
is written while the next one is built, the answers come back spread out, and each is
stored and sent as it arrives, so a burst is answered sooner (``bench/bench_app.py``).
A lone request only passes through an uncontended lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from runtime.clock import utcnow

log = logging.getLogger(__name__)
T = TypeVar("T")

OVERLOAD_STATUSES = frozenset({429, 503, 529})
"""Statuses that mean "too much, slow down": rate limits and overloaded servers."""
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_NS = 1_000_000_000
_RECHECK = 0.001
"""Least delay, in seconds, before looking again when a timer fired early."""


@dataclass
class Slot:
    """One call's turn. ``outcome`` is set by the caller: ``overloaded`` for a 429 or
    503 (with its ``Retry-After``), ``neutral`` for a failure that says nothing about
    load (a 400, a timeout); left alone, the call counts as a success."""

    generation: int
    outcome: str = "success"
    retry_after: float | None = None

    def overloaded(self, retry_after: float | None = None) -> None:
        self.outcome, self.retry_after = "overloaded", retry_after

    def neutral(self) -> None:
        self.outcome = "neutral"


class AdaptiveLimit:
    """At most ``limit`` calls in flight; ``limit`` moves between ``floor`` and ``ceiling``."""

    def __init__(
        self,
        name: str,
        ceiling: int,
        *,
        floor: int = 1,
        grow_after: int = 4,
        max_pause: float = 60.0,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if ceiling < 1 or not 1 <= floor <= ceiling or grow_after < 1:
            raise ValueError(f"bad limit for {name}: {floor} <= limit <= {ceiling}")
        self.name = name
        self.ceiling = ceiling
        self.floor = floor
        self.limit = ceiling
        self.in_flight = 0
        self.clock = clock
        """Monotonic nanoseconds; pauses are measured on it."""
        self.paused_until_ns = 0
        """Reading of ``clock`` from which new calls may start again."""
        self.grow_after = grow_after
        self.max_pause = max_pause
        self.peak = 0
        """Most calls in flight at once so far (status, tests)."""
        self._generation = 0
        self._successes = 0
        self._waiters: deque[asyncio.Future[int]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def paused_for(self) -> float:
        """Seconds until new calls may start again (0: not paused)."""
        return self._pause_left_ns() / _NS

    def _pause_left_ns(self) -> int:
        return max(0, self.paused_until_ns - self.clock())

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        """Wait for a turn, hold it for one call, then give it back with its outcome."""
        slot = self.take() or await self.wait()
        try:
            yield slot
        except BaseException:
            if slot.outcome == "success":
                slot.neutral()  # cancelled, or an error the caller did not classify
            raise
        finally:
            self.release(slot)

    def take(self) -> Slot | None:
        """A free turn at once (nobody waits, not paused), else None (``wait``). A turn
        taken is given back with ``release`` (``slot`` does both)."""
        if not self._waiters and self._open():
            self._take()
            return Slot(self._generation)
        return None

    async def wait(self) -> Slot:
        """Wait for a turn, in order (``take`` is the one without a wait)."""
        if not self._waiters and self._open():
            self._take()
            return Slot(self._generation)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake()  # arms the timer when the only obstacle is a pause
        try:
            return Slot(await waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, then cancelled
                self.in_flight -= 1
                self._wake()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _open(self) -> bool:
        return self.in_flight < self.limit and self._pause_left_ns() == 0

    def _take(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def _wake(self) -> None:
        """Hand free turns to waiters in order; if paused, come back when the pause ends."""
        while self._waiters and self._open():
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._take()
            waiter.set_result(self._generation)
        if self._waiters and self._timer is None:
            left = self._pause_left_ns()
            if left:
                delay = max(left / _NS, _RECHECK)
                self._timer = asyncio.get_running_loop().call_later(delay, self._resume)

    def _resume(self) -> None:
        self._timer = None
        self._wake()

    def release(self, slot: Slot) -> None:
        """Give back ``slot``'s turn; its outcome moves the limit."""
        self.in_flight -= 1
        if slot.outcome == "overloaded":
            self._back_off(slot)
        elif slot.outcome == "success":
            self._successes += 1
            if self._successes >= self.grow_after and self.limit < self.ceiling:
                self.limit += 1
                self._successes = 0
        self._wake()

    def _back_off(self, slot: Slot) -> None:
        if slot.generation == self._generation:  # once per round, not once per 429
            self._generation += 1
            self._successes = 0
            old, self.limit = self.limit, max(self.floor, self.limit // 2)
            log.warning(
                "provider %s is overloaded: %d calls at once, down from %d",
                self.name,
                self.limit,
                old,
            )
        if slot.retry_after is not None and slot.retry_after > 0:
            pause_ns = round(min(slot.retry_after, self.max_pause) * _NS)
            until = self.clock() + pause_ns
            if until > self.paused_until_ns:
                self.paused_until_ns = until
                if self._timer is not None:  # re-armed for the later end
                    self._timer.cancel()
                    self._timer = None
                log.warning("provider %s asks to wait %.1f s", self.name, slot.retry_after)


# -- Retry-After, as the providers send it ---------------------------------------------


def response_retry_after(response: object) -> float | None:
    """``retry_after_seconds`` of an SDK's HTTP response (httpx or aiohttp), if any."""
    headers = getattr(response, "headers", None)
    return retry_after_seconds(headers) if isinstance(headers, Mapping) else None


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: datetime | None = None
) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or an HTTP
    date); None when absent or unreadable. Header names are matched in any case."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        seconds = _number(ms)
        if seconds is not None:
            return seconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or utcnow())).total_seconds())


def retry_delay_from_details(details: Any) -> float | None:
    """Google's ``RetryInfo.retryDelay`` ("37s") from an error body's ``details``."""
    error = details.get("error", details) if isinstance(details, dict) else None
    items = error.get("details") if isinstance(error, dict) else None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            match = _DELAY.match(str(item.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


class Turns:
    """One model client's requests take turns at being built (FIFO)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # fair: waiters go in arrival order

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, built in turn (what it does before it returns its awaitable, and
        the awaitable up to its first wait); its answer (or error) once it comes."""
        async with self._lock:
            started = asyncio.ensure_future(call())
            try:
                # One loop iteration: ``started`` runs to its first wait meanwhile.
                await asyncio.sleep(0)
            except BaseException:
                started.cancel()
                raise
        return await started  # cancelling this cancels the call too
