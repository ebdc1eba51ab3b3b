"""Where a burst's CPU goes: the whole app in this process, 100 chats saying hello at once.

Default settings, Telegram and OpenAI configured, the embedded database: ``build_app``
as ``watchkeeper run`` builds it, against a fake Bot API and a fake OpenAI model that
answers after ``--model-seconds``. The fakes run on their own event loop in a second
thread, so neither the profile nor the CPU figure counts them: CPU is this thread's
(``time.thread_time``) plus the database server's: its threads in this process (all
this process's CPU but this thread's and the fakes'), or its process in ``/proc`` with
``--separate``.

Prints the burst time (updates available to the last ``sendMessage``), CPU-ms per
message, database commands per message by name (``pymongo.monitoring``), and with
``--profile`` the top functions by cumulative and by own time (cProfile; ``--dump FILE``
keeps the whole profile for ``pstats``).

    .venv/bin/python bench/profile_burst.py [--chats 100] [--model-seconds 1]
        [--profile [--dump FILE]]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import cProfile
import logging
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr
from pymongo import monitoring

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script

from agent.app.core import build_app
from agent.config import Settings
from runtime.heap import freeze_heap
from runtime.loop import run as run_app_loop
from tests.fakes.commands import Commands
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.fakes.telegram_api import TOKEN, FakeTelegram

FIRST_CHAT = 300_000
HI_CHAT = 299_999
TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


class Fakes:
    """The fake Bot API and model on their own loop and thread."""

    def __init__(self, model_seconds: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.telegram = FakeTelegram()
        self.model = FakeOpenAI()
        self.model_seconds = model_seconds

    def call(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def _start(self) -> None:
        await self.telegram.start()
        await self.model.start()
        body = self.model.completion("Hello! How can I help?")
        self.model.default = Answer(200, body, self.model_seconds)

    def thread_ms(self) -> float:
        """CPU the fakes' thread has used so far."""

        async def used() -> float:
            return time.thread_time() * 1000

        return self.call(used()).result(10)

    async def _stop(self) -> None:
        await self.telegram.stop()
        await self.model.stop()

    def start(self) -> None:
        self.thread.start()
        self.call(self._start()).result(10)

    def stop(self) -> None:
        self.call(self._stop()).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def push(self, chats: list[int], text: str) -> int:
        """Make one update per chat available; the number sent before them."""

        async def push() -> int:
            before = len(self.telegram.sent)
            for chat in chats:
                self.telegram.push_text(chat, text)
            return before

        return await asyncio.wrap_future(self.call(push()))

    async def wait_sent(self, count: int, within: float) -> float:
        """Wait until ``count`` messages were sent; when the last arrived (perf_counter)."""

        async def wait() -> float:
            sent = await self.telegram.wait_sent(count, within)
            return max(s.at for s in sent[:count])

        return await asyncio.wrap_future(self.call(wait()))


def children_cpu_ms() -> float:
    """CPU of this process's child processes (the embedded database server)."""
    me = os.getpid()
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            ticks += int(fields[11]) + int(fields[12])
    return ticks * 1000 / TICK


async def run(args: argparse.Namespace, fakes: Fakes, data: Path) -> None:
    chats = [FIRST_CHAT + i for i in range(args.chats)]
    commands = Commands()
    monitoring.register(commands)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=data,
        telegram_bot_token=SecretStr(TOKEN),
        telegram_api_base_url=fakes.telegram.url,
        openai_api_key=SecretStr("sk-bench"),
        openai_base_url=fakes.model.base_url,
        owner_telegram_ids=[HI_CHAT, *chats],
        embedded_db_separate_process=args.separate,
    )
    async with build_app(settings):
        freeze_heap()  # as watchkeeper run does once it serves
        sent = await fakes.push([HI_CHAT], "hi")
        await fakes.wait_sent(sent + 1, within=60)
        await asyncio.sleep(1.0)  # the "hi" finishes its writes
        profiler = cProfile.Profile() if args.profile else None
        commands.clear()
        cpu_from, db_from = time.thread_time(), children_cpu_ms()
        process_from, fakes_from = time.process_time(), fakes.thread_ms()
        pushed = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        calls_from = len(fakes.telegram.calls)
        sent = await fakes.push(chats, "hello")
        last = await fakes.wait_sent(sent + len(chats), within=300)
        await asyncio.sleep(0.5)  # the outbox records each send after it
        if profiler is not None:
            profiler.disable()
        counted = commands.counts.copy()  # the burst's, not what stopping sends
        bot_calls = collections.Counter(m for m, _ in fakes.telegram.calls[calls_from:])
        ours = (time.thread_time() - cpu_from) * 1000
        # The database's threads, when it runs in this process: what is neither ours
        # nor the fakes'.
        threads = (time.process_time() - process_from) * 1000 - ours
        threads -= fakes.thread_ms() - fakes_from
        db = children_cpu_ms() - db_from + max(0.0, threads)
    n = len(chats)
    print(f"{n} chats at once, model {args.model_seconds:g} s:")
    print(f"  burst {last - pushed:.2f} s (updates available to the last sendMessage)")
    print(f"  model calls in flight at once, at most: {getattr(fakes.model, 'peak', '?')}")
    print(
        f"  CPU {(ours + db) / n:.1f} ms per message (agent {ours / n:.1f}, database {db / n:.1f})"
    )
    total = sum(counted.values())
    print(f"  database commands per message: {total / n:.2f}")
    for name, count in counted.most_common():
        print(f"    {count / n:6.2f}  {name}")
    print(f"  Bot API calls per message: {sum(bot_calls.values()) / n:.2f}")
    for name, count in bot_calls.most_common():
        print(f"    {count / n:6.2f}  {name}")
    if profiler is not None:
        stats = pstats.Stats(profiler)
        calls = sum(s[1] for s in stats.stats.values())  # type: ignore[attr-defined]
        print(f"  function calls per message: {calls / n:.0f}")
        if args.dump:
            stats.dump_stats(args.dump)
        for order in ("cumulative", "tottime"):
            print(f"\n--- top {args.top} by {order} ---")
            stats.sort_stats(order).print_stats(args.top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--model-seconds", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true", help="print the cProfile top lists")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--dump", help="also write the profile here (pstats format)")
    parser.add_argument(
        "--separate", action="store_true", help="the database in a process of its own"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    fakes = Fakes(args.model_seconds)
    fakes.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_app_loop(run(args, fakes, Path(tmp) / "data"))
    finally:
        fakes.stop()


if __name__ == "__main__":
    main()
