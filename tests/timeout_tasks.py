"""pytest-timeout, with the await chains of the pending asyncio tasks in its report.

pytest-timeout's thread method (the one that works here: its signal method never
interrupts a uvloop that waits in libuv) dumps every thread's stack and ends the run.
For an async test the main thread's stack ends in ``run_until_complete``: it does not
say which await the test is stuck in, and under ``-q`` not even which test it is.
This plugin takes pytest-timeout's documented ``pytest_timeout_set_timer`` hook for the
thread method: at the deadline it prints the test's id and, for each pending task of
the running loop, the coroutine it runs and everything that coroutine awaits, then
hands over to pytest-timeout's own ``timeout_timer`` (captured output, stacks, exit).
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


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if settings.method != "thread":
        return None  # pytest-timeout's own way
    timer = threading.Timer(settings.timeout, _expired, (item, settings))
    timer.name = f"timeout {item.nodeid}"
    timer.daemon = True
    item.stash[_TIMER] = timer
    timer.start()
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    timer = item.stash.get(_TIMER, None)
    if timer is None:
        return None
    del item.stash[_TIMER]
    timer.cancel()
    timer.join()
    return True


def _expired(item: pytest.Item, settings: Any) -> None:
    if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
        return
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(item)
    terminal = item.config.get_terminal_writer()
    terminal.sep("+", title=f"Timeout: {item.nodeid} ran longer than {settings.timeout:g} s")
    try:
        terminal.write(tasks_report())
    except Exception as exc:  # the library's report and exit must still come
        terminal.write(f"(could not list the asyncio tasks: {exc!r})\n")
    pytest_timeout.timeout_timer(item, settings)


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
