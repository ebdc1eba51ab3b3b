"""The functions of ours one Telegram message, and one cron fire, pass through on their
way to ``sendMessage``, as the running app really enters them.

The whole app (``build_app``: embedded database, the Telegram channel, the OpenAI
adapter, the scheduler) runs against local fakes of the Bot API and of OpenAI. A
profile hook notes every function of ours entered from a start to the moment the Bot
API's ``send_message`` is called, in the tasks that carry the work:

- a message: from the long poll's return (``TelegramChannel._poll_loop`` resumed after
  ``getUpdates`` answered) to the reply's send, in the poll task, every task started
  from it meanwhile, and the pipeline's task that takes it off the intake's queue (and
  theirs: the conversation's worker, the model request). The second of two messages is
  traced, so first-use imports and caches are not counted.
- a cron fire: from the timer (``Engine.run_due`` as APScheduler's timer calls it) to
  the answer's send, in the timer's task and those started from it.

A hop is an ``async def`` of ours the work enters (it waits there: it can hand the work
to another task, the database or a service, and come back); each counts once however
often it is entered. The plain functions called on the way (conversions, checks, the
prompt's text) are counted apart; ``--calls`` lists them, and who entered each first.

    python bench/bench_hops.py [--calls]
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import tempfile
import time
from collections.abc import Coroutine, Generator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.app.core import build_app  # noqa: E402
from agent.config import Settings  # noqa: E402
from runtime.loop import run as run_app_loop  # noqa: E402
from tests.fakes.openai_api import FakeOpenAI  # noqa: E402
from tests.fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402

OURS = tuple(
    str(ROOT / package) + "/"
    for package in ("agent", "channels", "storage", "scheduler", "runtime")
)
INLINE = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
OWNER = 4242
WAITS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
"""A function the work waits in (a hop): it can hand the message to another task, the
database, a service or the next step, and come back."""
HANDED_ON = "TelegramChannel._take_chat"
"""Where the poll task hands a chat's updates on (each chat in a task of its own)."""
QUEUES = ("Pipeline._consume",)
"""Long-lived tasks the work reaches through a queue (the intake's ``updates``): the
walk follows it into them when they take it off."""
SEND = "send_message"
"""The Bot API call the walks end at (python-telegram-bot's ``Bot.send_message``)."""


def _ours(frame: FrameType) -> bool:
    code = frame.f_code
    return code.co_filename.startswith(OURS) and code.co_name not in INLINE


def _answering_poll(frame: FrameType) -> bool:
    """Whether ``frame`` still serves the long poll's own request (reading its answer)."""
    current: FrameType | None = frame
    while current is not None:
        if current.f_code.co_name == "get_updates" and not _ours(current):
            return True
        current = current.f_back
    return False


def _name(frame: FrameType) -> str:
    code = frame.f_code
    module = Path(code.co_filename).resolve().relative_to(ROOT)
    return f"{module}:{code.co_qualname}"


class Walk:
    """Functions of ours entered, in order, from ``start`` to the Bot API's send."""

    def __init__(self, title: str, start: str, *, restarts: bool = False) -> None:
        self.title = title
        self.start = start
        """The qualname whose entry (or resumption) starts the walk."""
        self.restarts = restarts
        """Whether ``start`` entered in another task starts the walk over (a timer's
        sweep that found nothing due may come first)."""
        self.armed = False
        self.done = asyncio.Event()
        self.entered: dict[str, str] = {}
        """Function -> the function of ours that first entered it ("" if none)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.first: asyncio.Task[Any] | None = None
        self.helpers: dict[str, str] = {}
        """Plain functions of ours entered (conversions, checks, look-ups in memory)."""
        self.began = 0.0
        self.took = 0.0

    def arm(self) -> None:
        self.armed, self.entered, self.helpers, self.tasks = True, {}, {}, set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.armed or event != "call":
            return
        task = asyncio.current_task()
        code = frame.f_code
        again = self.restarts and code.co_qualname == self.start and task not in self.tasks
        if not self.tasks or again:
            # The start, entered again in a task of its own (a cron timer's sweep that
            # found nothing due came first): the walk starts over there.
            if task is None or not _ours(frame) or code.co_qualname != self.start:
                return
            self.entered, self.helpers, self.tasks = {}, {}, {task}
            self.first = task
            self.began = time.perf_counter()
        elif task not in self.tasks:
            if task is None or code.co_qualname not in QUEUES:
                return
            self.tasks.add(task)  # took the work off a queue: the walk goes on there
        if code.co_name == SEND and "/telegram/" in code.co_filename and not _ours(frame):
            self.took = time.perf_counter() - self.began
            self.armed = False
            self.done.set()
            return
        if not _ours(frame) or _answering_poll(frame):
            return
        if code.co_qualname == HANDED_ON and self.first is not None:
            self.tasks.discard(self.first)  # handed on: the next long poll is not the walk
        name = _name(frame)
        if name not in self.entered and name not in self.helpers:
            caller = frame.f_back
            while caller is not None and not _ours(caller):
                caller = caller.f_back
            by = _name(caller) if caller is not None else ""
            (self.entered if code.co_flags & WAITS else self.helpers)[name] = by

    def adopt(self, child: asyncio.Task[Any], parent: asyncio.Task[Any] | None) -> None:
        if self.armed and parent is not None and parent in self.tasks:
            self.tasks.add(child)

    def report(self, calls: bool) -> None:
        print(f"{self.title}: {len(self.entered)} hops (functions of ours it waits in),")
        print(f"  and {len(self.helpers)} plain functions of ours called on the way")
        for n, (name, caller) in enumerate(self.entered.items(), 1):
            by = f"   <- {caller.rsplit(':', 1)[-1]}" if calls and caller else ""
            print(f"  {n:3} {name}{by}")
        if calls:
            print("  plain functions:")
            for name, caller in self.helpers.items():
                print(f"      {name}   <- {caller.rsplit(':', 1)[-1]}")
        print()


class Profiler:
    """One profile hook for the walk being traced, and a task factory that lets it
    follow the work into the tasks it starts (``gather``, ``create_task``)."""

    def __init__(self) -> None:
        self.walk: Walk | None = None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.walk is not None:
            self.walk(frame, event, arg)

    def task_factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        parent = asyncio.current_task(loop)
        task = asyncio.Task(coro, loop=loop, **kwargs)
        if self.walk is not None:
            self.walk.adopt(task, parent)
        return task

    async def trace(self, walk: Walk, go: Any) -> None:
        self.walk = walk
        walk.arm()
        sys.setprofile(self)
        try:
            go()
            await asyncio.wait_for(walk.done.wait(), timeout=90)
        finally:
            sys.setprofile(None)
            self.walk = None


def _next_fire_in(seconds: float) -> timedelta:
    """An offset for the app's clock that puts its next five-minute mark ``seconds``
    away (a recurring job may fire at most every 5 minutes)."""
    now = datetime.now(UTC)
    mark = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    return mark + timedelta(minutes=5) - now - timedelta(seconds=seconds)


async def walks(data: Path) -> tuple[Walk, Walk]:
    """Both walks, traced in one app whose data lives in ``data``."""
    profiler = Profiler()
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()
    loop.set_task_factory(profiler.task_factory)
    offset = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(UTC) + offset[0]

    message = Walk(
        "A Telegram text message, from the long poll's return", "TelegramChannel._poll_loop"
    )
    cron = Walk("A cron fire, from the timer", "Engine.run_due", restarts=True)
    try:
        async with FakeTelegram() as telegram, FakeOpenAI() as openai:
            settings = Settings(
                _env_file=None,  # type: ignore[call-arg]
                data_dir=data,
                llm_provider="openai",
                openai_api_key=SecretStr("sk-bench"),
                openai_base_url=openai.base_url,
                telegram_bot_token=SecretStr(TOKEN),
                telegram_api_base_url=telegram.url,
                owner_telegram_ids=[OWNER],
            )
            async with build_app(settings, on_part=lambda _text: None, clock=clock) as app:
                openai.reply_text("warm")
                telegram.push_text(OWNER, "first")
                await telegram.wait_sent(1, within=60)
                await app.pipeline.join()  # its worker gone: the next message starts one
                openai.reply_text("traced")
                await profiler.trace(message, lambda: telegram.push_text(OWNER, "second"))
                await telegram.wait_sent(2, within=60)
                # A recurring job, due at the next five-minute mark of the app's clock
                # (the pulse off: its own run would come at such a mark too).
                assert app.deps.cron is not None and app.scheduling is not None
                await app.scheduling.pulse.update_config(enabled=False)
                offset[0] = _next_fire_in(2.0)
                await app.deps.cron.create(
                    name="Backups",
                    instruction="Remind the owner to check the backups.",
                    cron_expression="*/5 * * * *",
                    origin_channel="telegram",
                    origin_chat_id=str(OWNER),
                )
                openai.reply_text("Time to check the backups!")
                await profiler.trace(cron, lambda: None)
                await telegram.wait_sent(3, within=60)
    finally:
        loop.set_task_factory(factory)
    return message, cron


async def main(calls: bool) -> None:
    with tempfile.TemporaryDirectory() as data:
        message, cron = await walks(Path(data))
    message.report(calls)
    cron.report(calls)
    print(f"hops: message {len(message.entered)}, cron fire {len(cron.entered)}")


if __name__ == "__main__":
    run_app_loop(main("--calls" in sys.argv))
