"""The one retry policy and the one retry loop helper.

``Backoff`` says how long to wait before each retry and how many there are; ``Pauses``
is a loop's failures in a row, sleeping the policy's next wait after each. Every loop
that retries after a failure uses them; each keeps its own numbers, as a named
``Backoff`` where the loop is built:

* the Telegram channel: its set-up, its long poll, and storing an update
  (``channels.telegram.channel.POLL_BACKOFF``);
* model calls: a retryable failure, and a 429 (never sooner than its
  ``Retry-After``; ``agent.llm.resilient.MODEL_BACKOFF``);
* a Telegram send refused by flood control, tried once more after the pause asked
  for (``channels.telegram.outbound.FLOOD_BACKOFF``);
* the outbox: a failed send, waiting at least what the service asked for
  (``channels.delivery.outbox.SEND_BACKOFF``);
* the run recorder: another try of a scheduled fire inside its grace window
  (``scheduler.fires.recorder.RETRY_BACKOFF``);
* MCP servers: restarting one that failed or was lost
  (``agent.tools.mcp.client.RESTART_BACKOFF``);
* WhatsApp: reconnecting (``channels.whatsapp.channel.RECONNECT_BACKOFF``).

``storage.retry`` waits for nothing on purpose: a write cut off by a dropped connection
is sent once more at once, on a fresh connection.

``Backoff`` is pure: no clock, no sleeping, no state. A loop that sleeps in process
counts its failures with ``Pauses`` (its ``sleep`` may be injected: a test's, or one a
stop cuts short); a loop whose next try is a due time stored in MongoDB (the outbox,
the run recorder) asks the policy for the wait and stores it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Draw = Callable[[], float]
"""A source of uniform numbers in [0, 1]: ``random.random``, or ``Random(seed).random``."""


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Waits growing by ``factor`` from ``first`` up to ``cap`` seconds.

    ``jitter`` is the share of each wait that is random: 0 waits exactly, 0.5 waits
    between half and all of it, so that callers failing together do not all come
    back together. ``retries`` is how many retries a loop makes before it gives up;
    None: it never gives up.
    """

    first: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0
    retries: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"backoff needs 0 < first <= cap, got {self.first} and {self.cap}")
        if self.factor < 1:
            raise ValueError(f"backoff factor must be at least 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff jitter must be between 0 and 1, got {self.jitter}")
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"backoff retries must not be negative, got {self.retries}")

    def allows(self, attempt: int) -> bool:
        """Whether retry number ``attempt`` (1-based) is within ``retries``."""
        return self.retries is None or attempt <= self.retries

    def delay(self, attempt: int, draw: Draw = random.random) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based); ``draw`` is asked
        for a number only when there is jitter."""
        if attempt < 1:
            raise ValueError(f"retries count from 1, got {attempt}")
        try:
            full = min(self.cap, self.first * self.factor ** (attempt - 1))
        except OverflowError:  # a loop that never gives up, days into an outage
            full = self.cap
        if not self.jitter:
            return full
        return full * (1 - self.jitter) + full * self.jitter * draw()

    def wait(self, attempt: int, asked: float | None = None, draw: Draw = random.random) -> float:
        """``delay``, or longer when the service asked for a longer wait (its
        ``Retry-After``): retrying sooner than asked only earns another refusal."""
        return max(self.delay(attempt, draw), asked or 0.0)


Sleep = Callable[[float], Awaitable[object]]


class Pauses:
    """One loop's failures in a row: each ``sleep`` waits the policy's next wait (or
    longer, when the service asked for longer), a success (``reset``) starts it over.

    ``failures``: how many in a row so far; ``upcoming``: the wait the next failure
    sleeps (shown in status); ``exhausted``: the policy's ``retries`` are used up.
    """

    def __init__(
        self, policy: Backoff, *, sleep: Sleep = asyncio.sleep, draw: Draw = random.random
    ) -> None:
        self.policy = policy
        self.failures = 0
        self._sleep = sleep
        self._draw = draw
        self.upcoming = policy.delay(1, draw)

    @property
    def exhausted(self) -> bool:
        return not self.policy.allows(self.failures + 1)

    def reset(self) -> None:
        self.failures, self.upcoming = 0, self.policy.delay(1, self._draw)

    async def sleep(self, asked: float | None = None) -> float:
        """Count a failure and sleep before the next try; returns the seconds slept."""
        delay = max(self.upcoming, asked or 0.0)
        self.failures += 1
        self.upcoming = self.policy.delay(self.failures + 1, self._draw)
        await self._sleep(delay)
        return delay
