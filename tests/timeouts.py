"""Per-test timeouts: a stuck test fails in seconds with every stack printed; the run goes on.

Loaded from ``tests/conftest.py``. Each phase of a test (setup, call, teardown) gets
``timeout`` seconds:

* ``@pytest.mark.timeout_seconds(120)`` on a test (or module, class) sets its timeout;
* else ``WATCHKEEPER_TEST_TIMEOUT`` in the environment, else the ``test_timeout_seconds``
  ini value, else 60 s. ``0`` switches timeouts off (and so do ``--pdb`` and ``--trace``).

How a stuck test is stopped, without killing pytest: a watchdog thread waits for the
deadline and then signals the main thread (``SIGALRM`` via ``pthread_kill``, so even a
blocking system call there is interrupted). The handler runs in the main thread, between
two bytecodes of whatever it was doing, and

1. records the stacks of every pending asyncio task (the whole await chain, not only the
   task's outer coroutine) and of every thread;
2. if an event loop is running (an async test or async fixture), cancels the task that
   ``run_until_complete`` waits for, so the test's ``finally`` blocks and ``async with``
   exits run and the session loop stays usable; otherwise (a sync test) raises ``Hang``
   right there;
3. if the test is still running ``grace`` seconds later (it swallowed the cancellation, or
   blocks the loop in sync code), records the stacks again and raises ``Hang`` wherever
   the main thread is.

``Hang`` is a ``KeyboardInterrupt`` so that no ``except Exception`` and no asyncio
callback runner swallows it; the hook wrappers below turn it (and the cancellation) into an
ordinary test failure whose message holds the stacks. As a last resort, should the main
thread never run Python code again, ``faulthandler`` dumps all threads to stderr and ends
the process a little later, so a wedged run still cannot hold CI until its own limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import inspect
import io
import os
import signal
import sys
import threading
import time
import traceback
from asyncio import base_events
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest

ENV = "WATCHKEEPER_TEST_TIMEOUT"
INI = "test_timeout_seconds"
MARKER = "timeout_seconds"
DEFAULT_SECONDS = 60.0
MAX_GRACE = 5.0
"""How long a cancelled test has to wind down before ``Hang`` is raised in it."""
STRIKES = 3
"""Strike 1 cancels (or raises), 2 and 3 raise; then only ``faulthandler`` is left."""
LAST_RESORT_MARGIN = 20.0
STACK_LIMIT = 40
"""Most recent frames shown per thread (the main thread is deep in pytest and pluggy)."""
SIGNAL = getattr(signal, "SIGALRM", None)
_RUN_UNTIL_COMPLETE_CB = getattr(base_events, "_run_until_complete_cb", None)
"""The done-callback ``loop.run_until_complete`` puts on the future it waits for."""


class Hang(KeyboardInterrupt):
    """Raised in the main thread when a test ran past its timeout."""


@dataclass(eq=False)
class _Guard:
    nodeid: str
    when: str
    seconds: float
    grace: float
    started: float
    deadline: float
    strikes_sent: int = 0
    """Signals the watchdog sent (under its lock)."""
    strikes_seen: int = 0
    """Signals the handler acted on (main thread only)."""
    done: bool = False
    dumps: list[str] = field(default_factory=list)


class _Watchdog:
    """One daemon thread that signals the main thread when the armed guard's deadline passes."""

    def __init__(self, main_ident: int, signum: int) -> None:
        self._main = main_ident
        self._signum = signum
        self._cond = threading.Condition()
        self._guard: _Guard | None = None
        self._thread = threading.Thread(target=self._run, name="test-timeout-watchdog", daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def arm(self, guard: _Guard) -> None:
        with self._cond:
            self._guard = guard
            self._cond.notify()

    def disarm(self, guard: _Guard) -> None:
        with self._cond:
            guard.done = True
            if self._guard is guard:
                self._guard = None
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                guard = self._guard
                if guard is None or guard.strikes_sent >= STRIKES:
                    self._cond.wait()
                    continue
                delay = guard.deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                guard.strikes_sent += 1
                guard.deadline = time.monotonic() + guard.grace
                signal.pthread_kill(self._main, self._signum)


_watchdog: _Watchdog | None = None
_current: _Guard | None = None
_stderr_fd: int | None = None
_previous_handler: Any = None


# -- stacks ------------------------------------------------------------------------------


def _awaited_by(obj: Any) -> Any:
    """What a coroutine, generator or async generator is waiting on, if anything."""
    for attr in ("cr_await", "gi_yieldfrom", "ag_await"):
        awaited = getattr(obj, attr, None)
        if awaited is not None:
            return awaited
    if type(obj).__name__ in ("async_generator_asend", "async_generator_athrow"):
        # ``await agen.__anext__()`` (an async generator fixture, ``async for``): the
        # awaitable hides its generator, but holds a reference to it.
        return next((o for o in gc.get_referents(obj) if inspect.isasyncgen(o)), None)
    return None


def _await_chain(obj: Any) -> Iterator[tuple[FrameType, int]]:
    """The frames of a coroutine and of everything it awaits, outermost first."""
    seen: set[int] = set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        for attr in ("cr_frame", "gi_frame", "ag_frame"):
            frame = getattr(obj, attr, None)
            if frame is not None:
                yield frame, frame.f_lineno
                break
        obj = _awaited_by(obj)


def _format_task(task: asyncio.Task[Any]) -> str:
    lines = [f"{task!r}\n"]
    frames = list(_await_chain(task.get_coro()))
    if frames:
        lines.extend(traceback.format_list(traceback.StackSummary.extract(iter(frames))))
    else:
        lines.append("  (no Python frames: running now, see the main thread below)\n")
    return "".join(lines)


def _dump(guard: _Guard, frame: FrameType | None, loop: asyncio.AbstractEventLoop | None) -> str:
    out = io.StringIO()
    elapsed = time.monotonic() - guard.started
    out.write(
        f"==== {guard.nodeid} ({guard.when}): still running after {elapsed:.1f} s"
        f" (strike {guard.strikes_seen} of {STRIKES}) ====\n"
    )
    if loop is not None:
        tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
        out.write(f"---- {len(tasks)} pending asyncio task(s) ----\n")
        for task in tasks:
            out.write(_format_task(task))
    else:
        out.write("---- no event loop running in the main thread ----\n")
    threads = {t.ident: t for t in threading.enumerate()}
    frames = sys._current_frames()
    out.write(f"---- {len(frames) - 1} thread(s) ----\n")
    me = threading.get_ident()
    for ident, innermost in frames.items():
        if _watchdog is not None and ident == _watchdog.ident:
            continue
        top: FrameType | None = innermost
        thread = threads.get(ident)
        name = thread.name if thread is not None else "?"
        if ident == me:
            top = frame  # the interrupted code, not this signal handler
            name += " (main, interrupted here)"
        out.write(f"Thread {name} [{ident}]:\n")
        if top is not None:
            out.write("".join(traceback.format_stack(top, limit=STACK_LIMIT)))
    return out.getvalue()


def _awaited_tasks(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """The tasks ``run_until_complete`` is waiting for: the test, or an async fixture."""
    found = []
    for task in asyncio.all_tasks(loop):
        callbacks = getattr(task, "_callbacks", None) or ()
        if any(cb is _RUN_UNTIL_COMPLETE_CB for cb, *_ in callbacks):
            found.append(task)
    return found


def _on_signal(signum: int, frame: FrameType | None) -> None:
    guard = _current
    if guard is None or guard.done or guard.strikes_seen >= guard.strikes_sent:
        return  # late signal for a phase that already ended
    if frame is not None and frame.f_globals is globals():
        return  # in this module's own bookkeeping: the phase is just starting or ending
    guard.strikes_seen = guard.strikes_sent
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    try:
        guard.dumps.append(_dump(guard, frame, loop))
    except Exception as exc:  # never let the dump itself hide the timeout
        guard.dumps.append(f"(could not dump stacks: {exc!r})\n")
    if guard.strikes_seen == 1 and loop is not None:
        tasks = _awaited_tasks(loop)
        if tasks:
            message = f"test timeout ({guard.seconds:g} s)"
            for task in tasks:
                loop.call_soon_threadsafe(task.cancel, message)
            return
    raise Hang(f"{guard.nodeid} timed out after {guard.seconds:g} s ({guard.when})")


# -- configuration -----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI,
        f"Seconds each test phase may take before it fails with all stacks dumped "
        f"(0: no limit). {ENV} overrides it, @pytest.mark.{MARKER}(n) overrides both.",
        default=str(DEFAULT_SECONDS),
    )


def pytest_configure(config: pytest.Config) -> None:
    global _watchdog, _stderr_fd, _previous_handler
    config.addinivalue_line(
        "markers",
        f"{MARKER}(seconds): fail the test when a phase runs longer (0: no limit); "
        f"default {ENV} or the {INI} ini value",
    )
    if (
        _watchdog is not None
        or SIGNAL is None
        or not hasattr(signal, "pthread_kill")
        or threading.current_thread() is not threading.main_thread()
    ):
        return
    _previous_handler = signal.signal(SIGNAL, _on_signal)
    _watchdog = _Watchdog(threading.main_thread().ident or 0, SIGNAL)
    if sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):
            _stderr_fd = os.dup(sys.__stderr__.fileno())  # capture is suspended here


def pytest_unconfigure(config: pytest.Config) -> None:
    global _stderr_fd
    if _watchdog is not None and SIGNAL is not None and signal.getsignal(SIGNAL) is _on_signal:
        signal.signal(SIGNAL, _previous_handler or signal.SIG_DFL)
    if _stderr_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_stderr_fd)
        _stderr_fd = None


def _seconds_for(item: pytest.Item) -> float:
    if item.config.getoption("usepdb", False) or item.config.getoption("trace", False):
        return 0.0
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("seconds", DEFAULT_SECONDS)
        return float(value)
    from_env = os.environ.get(ENV, "").strip()
    if from_env:
        return float(from_env)
    return float(item.config.getini(INI) or DEFAULT_SECONDS)


def _last_resort(item: pytest.Item, seconds: float) -> bool:
    """Arm faulthandler to dump every thread and exit should the main thread be wedged."""
    if _stderr_fd is None:
        return False
    try:
        if float(item.config.getini("faulthandler_timeout") or 0) > 0:
            return False  # pytest's own faulthandler timer is in use
    except (ValueError, KeyError):
        pass
    faulthandler.dump_traceback_later(seconds, exit=True, file=_stderr_fd)
    return True


def _failure(guard: _Guard) -> BaseException:
    head = (
        f"Timeout: {guard.when} of {guard.nodeid} ran longer than {guard.seconds:g} s "
        f"(@pytest.mark.{MARKER}(n) or {ENV} to change it). Stacks when it was stopped:\n\n"
    )
    return pytest.fail.Exception(head + "\n".join(guard.dumps), pytrace=False)


def _stand_down(guard: _Guard, armed: bool) -> None:
    global _current
    guard.done = True  # first: from here on the signal handler ignores this guard
    _current = None
    if _watchdog is not None:
        _watchdog.disarm(guard)
    if armed:
        faulthandler.cancel_dump_traceback_later()


def _guarded(item: pytest.Item, when: str) -> Generator[None, object, object]:
    global _current
    seconds = _seconds_for(item) if _watchdog is not None else 0.0
    if seconds <= 0 or _watchdog is None:
        return (yield)
    start = time.monotonic()
    grace = min(MAX_GRACE, seconds)
    guard = _Guard(item.nodeid, when, seconds, grace, start, start + seconds)
    _current = guard
    armed = _last_resort(item, seconds + STRIKES * grace + LAST_RESORT_MARGIN)
    _watchdog.arm(guard)
    try:
        result = yield
    except BaseException as exc:
        _stand_down(guard, armed)
        if not guard.strikes_seen:
            raise
        ours = isinstance(exc, (Hang, asyncio.CancelledError))
        raise _failure(guard) from (None if ours else exc)  # keep an error from the cleanup
    _stand_down(guard, armed)
    if guard.strikes_seen:  # cancelled, yet the test swallowed it and returned
        raise _failure(guard)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "teardown"))
