"""Sends paced to a service's published rate limits, on plain asyncio.

Telegram refuses more than about 30 messages a second from one bot, more than one a
second in one chat and more than 20 a minute in one group; Twilio sends one SMS segment
a second from a long-code number. Past them a service answers 429 (and holds a bot that
keeps at it for longer), so a send waits its turn here instead. Two shapes cover them:

- ``Window(limit, period)``: at most ``limit`` sends in any ``period`` seconds, shared by
  every caller and granted first come, first served (a bot's 30 a second, a group's 20 a
  minute).
- ``Lane``: one destination's sends one at a time, in the order they arrived, each a gap
  after the one before (a chat's second; a number's second per segment), then a place
  in the destination's windows. A sender holds the lane across a long message's chunks,
  so they stay together and in order; other destinations have lanes of their own and
  never wait behind this one. ``Pace`` keeps the lanes by destination.

A send in its lane is ``take_turn()`` (else ``await turn()``), the request,
``done(gap)``. On the common path (a free lane, no gap, room in the windows) one send
waits in none of them and enters seven functions of ours: ``Pace.lane``, the lane's
enter and exit, ``take_turn``, ``done``, and the bot window's ``take`` and ``release``.

A send is counted from when its answer came back, not from when it left. The service
counts arrivals and a request arrives before its answer, so no spread of network delays
can make two sends look closer to the service than the pace allowed. It is timed by
``time.monotonic()``, read at that moment: the loop's own ``time()`` under uvloop ticks in
whole milliseconds and is read once per turn of the loop, and a pace timed by it let a
send arrive a fraction of a millisecond early. A send the service refused outright
(nothing delivered) is released uncounted and gives its place back.

Only the waiting happens here: a caller takes its HTTP connection after its turn comes,
so a paced message never holds one. A cancelled waiter leaves nothing behind (its place
goes to the next); ``Pace.close`` fails every waiter, and any later wait, with
``PacingClosed``, so a stopping channel hands its queued sends back to the outbox at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable
from types import TracebackType


class PacingClosed(Exception):
    """The channel is stopping: the send did not go, and may be tried again later."""


class Window:
    """At most ``limit`` sends in any ``period`` seconds; a send holds its place from
    ``acquire`` until ``period`` after its ``release`` (or until an uncounted release)."""

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("a window needs a limit of at least 1 and a positive period")
        self._limit = limit
        self._period = period
        self._busy = 0
        """Sends granted and not yet answered."""
        self._ends: deque[float] = deque()
        """When the answers of the counted sends of the last ``period`` came back."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def _room(self, now: float) -> bool:
        horizon, ends = now - self._period, self._ends
        while ends and ends[0] <= horizon:
            ends.popleft()
        return self._busy + len(ends) < self._limit

    def idle(self, now: float) -> bool:
        """Nothing granted, waiting or counted any more: forgetting it changes nothing."""
        self._room(now)
        return not (self._busy or self._ends or self._waiters)

    def take(self) -> bool:
        """A place at once if one is free and nobody waits (the common case: no
        future, no timer); False otherwise (``acquire`` waits for one)."""
        if self._closed or self._waiters:
            return False
        if self._room(time.monotonic()):
            self._busy += 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a place; ``PacingClosed`` once closed."""
        if self._closed:
            raise PacingClosed
        if self.take():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        self._grant(loop)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._busy -= 1  # granted as it was cancelled: the place goes to the next
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            self._grant(loop)
            raise

    def release(self, *, counted: bool = True) -> None:
        """The send's answer came back; ``counted=False``: it delivered nothing."""
        loop = asyncio.get_running_loop()
        self._busy -= 1
        if counted:
            self._ends.append(time.monotonic())
        if self._waiters:
            self._grant(loop)

    def _grant(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        waiters = self._waiters
        while waiters and self._room(now):
            waiter = waiters.popleft()
            if not waiter.done():  # a cancelled one is skipped
                self._busy += 1
                waiter.set_result(None)
        if waiters and self._timer is None and self._ends:
            # Full: room comes with an answer (``release`` grants then) or when the
            # oldest counted send leaves the window.
            wait = self._ends[0] + self._period - now  # a timer early by a tick comes again
            self._timer = loop.call_later(wait, self._expired, loop)

    def _expired(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._grant(loop)

    def close(self) -> None:
        """Fail every waiter and every later ``acquire`` with ``PacingClosed``."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(PacingClosed())

    def open(self) -> None:
        """Grant places again after ``close`` (what was counted still counts)."""
        self._closed = False


class Lane:
    """One destination's sends: one at a time, in arrival order (``async with lane:``,
    first come, first served), each waiting the gap the previous one left, then a place
    in each of the destination's ``windows``."""

    def __init__(self, closed: asyncio.Event, windows: tuple[Window, ...] = ()) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None]] = deque()
        """Senders waiting to hold the lane, first come first served: a new comer never
        overtakes a waiter, and a leaving holder hands the lane to the first."""
        self._closed = closed
        self._windows = windows
        self._next_at = 0.0
        self.users = 0
        """Holders and waiters: a lane in use is never forgotten."""

    def idle(self, now: float) -> bool:
        return self.users == 0 and self._next_at <= now

    def __aenter__(self) -> Awaitable[Lane]:
        """Hold the lane: at once when nobody holds it or waits for it (a finished
        future: nothing to wait in), else in line. ``PacingClosed`` once closed."""
        if self._closed.is_set():
            raise PacingClosed
        self.users += 1
        if not self._held and not self._waiters:
            self._held = True
            entered: asyncio.Future[Lane] = asyncio.get_running_loop().create_future()
            entered.set_result(self)
            return entered
        return self._in_line()

    async def _in_line(self) -> Lane:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            self.users -= 1
            if waiter.done() and not waiter.cancelled():
                self._hand_on()  # handed the lane as it was cancelled: the next holds it
            else:
                with contextlib.suppress(ValueError):  # a cancelled one may be gone
                    self._waiters.remove(waiter)
            raise
        return self

    def _hand_on(self) -> None:
        """The holder leaves: the first waiter still waiting holds the lane next."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._held = False

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._hand_on()
        self.users -= 1

    def take_turn(self) -> bool:
        """A turn at once, with no gap to wait out and a place free in each window (the
        common case: nothing to wait in); False: nothing taken, ``turn`` waits for one.
        A turn taken is followed by one ``done``."""
        if self._closed.is_set() or self._next_at > time.monotonic():
            return False
        for taken, window in enumerate(self._windows):
            if not window.take():
                for held in self._windows[:taken]:
                    held.release(counted=False)
                return False
        return True

    async def turn(self) -> None:
        """Wait out the previous send's gap, then take a place in each window; every
        ``turn`` is followed by one ``done``. ``PacingClosed`` once closed."""
        while self._closed.is_set() or self._next_at > time.monotonic():
            if self._closed.is_set():
                raise PacingClosed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_at - time.monotonic()):
                    await self._closed.wait()
        taken = 0
        try:
            for window in self._windows:
                if not window.take():
                    await window.acquire()
                taken += 1
        except BaseException:
            for window in self._windows[:taken]:
                window.release(counted=False)
            raise

    def done(self, gap: float, counted: bool = True) -> None:
        """The send's answer came back (or its request failed): release its places, and
        keep the next send ``gap`` seconds away. ``counted=False``: the service refused it
        and delivered nothing, so it takes no place in the windows."""
        for window in self._windows:
            window.release(counted=counted)
        if gap > 0:
            self._next_at = max(self._next_at, time.monotonic() + gap)


class Pace:
    """The lanes of one sender, by destination, and what they share; ``close`` fails
    every wait. A subclass says which windows a destination's sends take
    (``windows_for``).

    Lanes and windows of destinations gone quiet are forgotten (swept whenever their
    number has doubled since the last sweep), so a million chats over a year cost what
    the chats of the last minute do."""

    SWEEP_FROM = 64

    def __init__(self) -> None:
        self._closed = asyncio.Event()
        self._lanes: dict[str, Lane] = {}
        self._windows: dict[str, Window] = {}
        self._shared: list[Window] = []
        self._sweep_at = self.SWEEP_FROM

    def lane(self, key: str) -> Lane:
        """The lane of ``key`` (made with its windows when new)."""
        lane = self._lanes.get(key)
        if lane is None:
            self._sweep()
            lane = self._lanes[key] = Lane(self._closed, self.windows_for(key))
        return lane

    def windows_for(self, key: str) -> tuple[Window, ...]:
        """The windows a send to ``key`` takes a place in (none here)."""
        return ()

    def window(self, key: str, limit: int, period: float) -> Window:
        """The window of ``key`` (a group), made with ``limit`` and ``period`` if new."""
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = Window(limit, period)
            if self._closed.is_set():
                window.close()
        return window

    def shared(self, limit: int, period: float) -> Window:
        """A window for every destination at once (a bot's 30 a second)."""
        window = Window(limit, period)
        self._shared.append(window)
        return window

    def _sweep(self) -> None:
        if len(self._lanes) < self._sweep_at:
            return
        now = time.monotonic()
        self._lanes = {k: v for k, v in self._lanes.items() if not v.idle(now)}
        # A window stays while a lane holds it, so close() still reaches its waiters.
        self._windows = {
            k: v for k, v in self._windows.items() if k in self._lanes or not v.idle(now)
        }
        self._sweep_at = max(self.SWEEP_FROM, 2 * len(self._lanes))

    @property
    def tracked(self) -> int:
        """Destinations remembered."""
        return len(self._lanes)

    def close(self) -> None:
        """Fail every wait, and every later one, with ``PacingClosed``."""
        self._closed.set()
        for window in (*self._shared, *self._windows.values()):
            window.close()

    def open(self) -> None:
        self._closed.clear()
        for window in (*self._shared, *self._windows.values()):
            window.open()
