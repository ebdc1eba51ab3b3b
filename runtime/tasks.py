"""Background tasks every layer runs: waiting for a wake-up, and stopping for good.

Here because ``storage`` is the one package every other may import. Two traps are
closed once for all:

* ``asyncio.wait_for(event.wait(), t)`` on Python 3.11 swallows a cancellation that
  lands just as the event is set (gh-86296), so a loop cancelled by ``stop()`` could
  run on for ever and ``stop()`` wait for it for ever. ``wait_event`` uses
  ``asyncio.timeout`` instead, which never swallows it.
* Stopping a task is bounded: it is cancelled, given ``grace`` seconds, and if it is
  still running the log says which task and where it is stuck, and we move on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)
STOP_GRACE = 5.0


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True when it was set."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def stop_task(task: asyncio.Task[object] | None, grace: float = STOP_GRACE) -> None:
    """Cancel ``task`` and wait at most ``grace`` seconds for it to end."""
    if task is None or task.done():
        if task is not None and not task.cancelled():
            with contextlib.suppress(BaseException):
                task.result()  # retrieved, so asyncio does not warn about it
        return
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=grace)
    if not done:
        where = "".join(
            f"\n  {frame.f_code.co_filename}:{frame.f_lineno}" for frame in task.get_stack()
        )
        log.error(
            "task %s did not stop within %.0f s; left behind, stuck at:%s",
            task.get_name(),
            grace,
            where,
        )
        return
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.result()
