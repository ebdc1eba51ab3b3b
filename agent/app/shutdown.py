"""One deadline for stopping the app, shared by every part's stop.

systemd and docker send SIGTERM and, a fixed time later (docker: 10 s), SIGKILL. The
parts stop in reverse order (``agent.app.core``): the HTTP server, the features, the
pipeline, the outbox, the channels. Each stop step gets what remains of ``STOP_BUDGET``,
counted from the first step; one still running at the deadline (say, waiting for a
database stuck in a long operation) is cancelled, logged and left behind, and the next
step begins. A step that begins after the deadline still gets ``STEP_FLOOR`` to cancel
its tasks and close its sockets. The database is closed after all of them, bounded on
its own (``storage.db``, ``storage.embedded.owner``).

What a step cut short would have written is not lost; the next start finds it:

* a message being handled, or handled but not yet marked done, stays ``processing``
  and is handled again, its replies under the same keys (``channels.delivery.pipeline``);
* a reply sent but not yet recorded is sent again (``channels.delivery.outbox``: at least once);
* a run cut off stays ``running`` under a lease that lapses, and is reclaimed
  (``scheduler.fires.leases``);
* a Telegram update not yet stored was not acknowledged and comes again.

Two exceptions: token counts of the last ``storage.repos.usage.FLUSH_SECONDS`` (kept in
memory until written), and an SMS webhook still unstored after the HTTP server's
``REQUEST_GRACE`` (only when the database does not answer; Twilio does not send it
again).

A step runs as its own task, so a part that swallows a cancellation (a dependency on
Python 3.11 can, gh-86296) cannot hold the stop past the deadline either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_BUDGET = 4.0
"""Seconds for every part's stop together, from the first step on. With the database's
own bounds after it (``storage.db.CLOSE_TIMEOUT``, ``storage.embedded.owner.STOP_TIMEOUT``) a
stop ends well inside docker's 10 s grace, whatever the database does."""
STEP_FLOOR = 0.2
"""Seconds a step still gets when it begins after the deadline: enough to cancel its
tasks and close its sockets, not to wait for a database."""


class Shutdown:
    """The stop's shared deadline, armed when the first step begins."""

    def __init__(self, budget: float = STOP_BUDGET, floor: float = STEP_FLOOR) -> None:
        self.budget = budget
        self.floor = floor
        self._deadline: float | None = None
        self.cut: list[str] = []
        """The steps cut short at the deadline, in order (for the log and for tests)."""

    def begin(self) -> None:
        """Start counting now, if not yet started."""
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().time() + self.budget

    def left(self, keep: float = 0.0) -> float:
        """Seconds until the deadline less ``keep`` (never below 0); the whole budget
        before the stop began. For a part that hands out grace to what it runs."""
        if self._deadline is None:
            return max(0.0, self.budget - keep)
        return max(0.0, self._deadline - asyncio.get_running_loop().time() - keep)

    async def step(self, name: str, stop: Callable[[], Awaitable[T]]) -> T | None:
        """``stop()`` within what remains (at least ``floor``); None if it was cut short.

        An exception it raises is raised here, as the exit stack expects."""
        self.begin()
        task = asyncio.ensure_future(stop())
        seconds = max(self.left(), self.floor)
        try:
            done, _ = await asyncio.wait({task}, timeout=seconds)
        except asyncio.CancelledError:
            task.cancel()  # our own stop was cancelled: so is the step
            raise
        if done:
            return task.result()
        task.cancel()
        self.cut.append(name)
        log.warning(
            "stopping: %s did not finish within the stop budget (%g s); cut short",
            name,
            self.budget,
        )
        task.add_done_callback(_retrieve)
        return None

    def bounded(
        self, name: str, stop: Callable[[], Awaitable[object]]
    ) -> Callable[[], Awaitable[None]]:
        """``stop`` as an exit callback that keeps to the deadline."""

        async def bounded_stop() -> None:
            await self.step(name, stop)

        return bounded_stop


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A step left behind: its outcome is read, so asyncio does not warn about it."""
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.result()


def _name(stop: object) -> str:
    return str(getattr(stop, "__qualname__", None) or repr(stop))


class ShutdownStack(contextlib.AsyncExitStack):
    """An exit stack whose asynchronous exits keep to one ``Shutdown``'s deadline.

    The features receive it as their ``stack``: whatever stop they push shares the
    deadline without knowing about it. Synchronous exits run as usual."""

    def __init__(self, shutdown: Shutdown) -> None:
        super().__init__()
        self.shutdown = shutdown

    def push_async_callback(
        self, callback: Callable[..., Awaitable[Any]], /, *args: Any, **kwds: Any
    ) -> Callable[..., Awaitable[Any]]:
        name = _name(callback)
        super().push_async_callback(self.shutdown.bounded(name, lambda: callback(*args, **kwds)))
        return callback

    async def enter_async_context(
        self, cm: contextlib.AbstractAsyncContextManager[T], *, name: str | None = None
    ) -> T:
        """``cm`` entered; its exit keeps to the deadline, logged as ``name`` if cut."""
        bounded = _Bounded(cm, self.shutdown, name or type(cm).__qualname__)
        return await super().enter_async_context(bounded)


class _Bounded(contextlib.AbstractAsyncContextManager[T]):
    """``cm`` whose exit keeps to ``shutdown``'s deadline (not suppressing when cut)."""

    def __init__(
        self, cm: contextlib.AbstractAsyncContextManager[T], shutdown: Shutdown, name: str
    ) -> None:
        self._cm = cm
        self._shutdown = shutdown
        self._name = name

    async def __aenter__(self) -> T:
        return await self._cm.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        exit_cm = self._cm.__aexit__
        return await self._shutdown.step(self._name, lambda: exit_cm(exc_type, exc, tb))
