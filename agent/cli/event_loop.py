"""The event loop every ``watchkeeper`` command runs on: uvloop where it is installed.

uvloop (libuv) runs the same asyncio code with less work per callback, socket and timer.
In a 100-chat burst the agent process spent 0.6-0.9 ms less CPU per message than on
asyncio's own loop (``bench/profile_burst.py``: 5.1-5.8 -> 4.5-4.7 ms; ``bench_app``,
three paired runs: 8.2 -> 7.4 ms for both processes). It costs ~2 MiB of resident
memory and ~5 ms of import. Where it is not installed (a platform without a wheel),
asyncio's own loop runs everything unchanged. The test suite runs on uvloop, as the
app does (``tests/offline.py`` keeps it off the internet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory() -> LoopFactory | None:
    """uvloop's loop, or None (asyncio's own) when uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on ``loop_factory()``'s loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
