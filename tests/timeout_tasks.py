"""pytest-timeout, with the await chains of the pending asyncio tasks in its report.

pytest-timeout's thread method (the one that works here: its signal method never
interrupts a uvloop that waits in libuv) dumps every thread's stack and ends the run.
For an async test the main thread's stack ends in ``run_until_complete``: it does not
say which await the test is stuck in, and under ``-q`` not even which test it is.
This plugin adds to pytest-timeout through its documented hooks and public names only
(``pytest_timeout_set_timer``, ``pytest_timeout_cancel_timer``, ``is_debugging``): for
the thread method it starts a timer of its own that ends ``LEAD`` seconds before
pytest-timeout's and prints the test's id and, for each pending task of the running
loop, the coroutine it runs and everything that coroutine awaits. It returns None from
both hooks, so pytest-timeout's own timer still runs and does what it does (captured
output, stacks, exit).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import io
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
import pytest_timeout  # type: ignore[import-untyped]

_TIMER = pytest.StashKey[threading.Timer]()


LEAD = 0.5
"""Seconds before pytest-timeout's deadline that the tasks are listed."""


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    if settings.method != "thread" or settings.timeout <= 0:
        return  # pytest-timeout's signal method interrupts the test itself
    timer = threading.Timer(max(settings.timeout - LEAD, 0.0), _expiring, (item, settings))
    timer.name = f"timeout report {item.nodeid}"
    timer.daemon = True
    item.stash[_TIMER] = timer
    timer.start()
    # None: pytest-timeout sets its own timer too, and it ends the run


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    timer = item.stash.get(_TIMER, None)
    if timer is not None:
        del item.stash[_TIMER]
        timer.cancel()
        timer.join()


def _expiring(item: pytest.Item, settings: Any) -> None:
    if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
        return
    terminal = item.config.get_terminal_writer()
    terminal.sep("+", title=f"Timeout: {item.nodeid} ran longer than {settings.timeout:g} s")
    try:
        terminal.write(tasks_report())
    except Exception as exc:  # pytest-timeout's own report and exit must still come
        terminal.write(f"(could not list the asyncio tasks: {exc!r})\n")
    terminal.flush()


def tasks_report() -> str:
    """Every pending task of every running event loop, with its whole await chain."""
    out = io.StringIO()
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in loops:
        if not loop.is_running():
            continue
        tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
        out.write(f"---- {len(tasks)} pending asyncio task(s) on {loop!r} ----\n")
        for task in tasks:
            out.write(f"{task!r}\n")
            frames = list(await_chain(task.get_coro()))
            out.write("".join(traceback.format_list(traceback.StackSummary.extract(frames))))
    return out.getvalue() or "---- no event loop running ----\n"


def awaited_by(obj: Any) -> Any:
    """What a coroutine, generator or async generator waits on, if anything."""
    for attr in ("cr_await", "gi_yieldfrom", "ag_await"):
        awaited = getattr(obj, attr, None)
        if awaited is not None:
            return awaited
    if type(obj).__name__ in ("async_generator_asend", "async_generator_athrow"):
        # ``await agen.__anext__()`` (an async generator fixture, ``async for``): the
        # awaitable does not name its generator, but refers to it.
        return next((o for o in gc.get_referents(obj) if inspect.isasyncgen(o)), None)
    return None


def await_chain(obj: Any) -> Iterator[tuple[FrameType, int]]:
    """The frames of a coroutine and of everything it awaits, outermost first."""
    seen: set[int] = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        for attr in ("cr_frame", "gi_frame", "ag_frame"):
            frame = getattr(obj, attr, None)
            if frame is not None:
                yield frame, frame.f_lineno
                break
        obj = awaited_by(obj)
