"""The engine's runs in flight: at most ``max_parallel`` at once, logged if one raises,
and given a grace period to finish when the engine stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from storage.tasks import stop_task


class TaskPool:
    def __init__(self, max_parallel: int, log: logging.Logger) -> None:
        self._slots = asyncio.Semaphore(max_parallel)
        self._tasks: set[asyncio.Task[object]] = set()
        self._log = log
        """The engine's logger, so a run that raised is reported under its name."""

    @property
    def busy(self) -> bool:
        """Whether any run is still in flight."""
        return bool(self._tasks)

    def spawn(self, work: Awaitable[object]) -> asyncio.Task[object]:
        async def bounded() -> object:
            async with self._slots:
                return await work

        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(bounded())
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("scheduled run raised", exc_info=task.exception())

    async def join(self) -> None:
        """Wait for every run in flight now."""
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self, grace: float) -> None:
        """Give the runs in flight ``grace`` seconds to finish, then cancel them (at once
        too when this stop is itself cancelled: the app's stop deadline passed)."""
        tasks = list(self._tasks)
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=grace)
        finally:
            for task in tasks:
                task.cancel()  # all at once: one run slow to end does not hold the others
        for task in tasks:
            await stop_task(task)
