"""The event loop every command, test and benchmark runs on.

uvloop where it is installed: libuv runs the same asyncio code with less work per
callback, socket and timer, so a burst costs less CPU per message
(``bench/profile_burst.py``) for a little memory. Where it is not installed (a platform
without a wheel), asyncio's own loop runs everything unchanged. The test suite runs on
uvloop too.
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
