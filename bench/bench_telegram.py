"""Telegram end to end: fake Bot API -> polling channel -> pipeline -> agent -> outbox.

1,000 updates from 100 chats, an instant in-process model, the real pipeline on an
embedded SecantusDB. Latency runs from the moment an update is available to
``getUpdates`` to the moment the matching ``sendMessage`` reaches the fake.

Two runs: a burst (all updates available at once: throughput) and a paced run at a
fixed arrival rate (latency when the system keeps up). Targets: >= 100 msg/s,
p99 <= 200 ms.

    /tmp/venv/bin/python bench/bench_telegram.py [--updates 1000] [--chats 100] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script

from agent.app.registry import reach
from agent.config import Settings
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Dispatcher
from agent.owner import OwnerSettings
from agent.reach import Owners
from agent.tools.catalog import ToolCatalog
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.telegram import TelegramChannel
from runtime.clock import utcnow
from runtime.loop import run as run_app_loop
from storage.collections import ensure_indexes
from storage.db import open_database
from storage.embedded.owner import EmbeddedServer
from tests.fakes.scripted import Request, ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram

FIRST_CHAT = 100_000
Doc = dict[str, Any]


@dataclass
class Figures:
    label: str
    count: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def p99(self) -> float:
        lat = sorted(self.latencies_ms)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))]

    def show(self) -> None:
        p50 = statistics.median(self.latencies_ms)
        worst = max(self.latencies_ms)
        print(
            f"{self.label:<6} {self.count} messages in {self.seconds:.2f} s"
            f" = {self.rate:.0f} msg/s;"
            f" latency p50 {p50:.0f} ms, p99 {self.p99:.0f} ms, max {worst:.0f} ms"
        )


def _echo(request: Request) -> str:
    return f"ok {request.messages[-1].text}"


@contextlib.asynccontextmanager
async def _database(data: Path, args: argparse.Namespace) -> AsyncIterator[AsyncDatabase[Doc]]:
    """The app's own ``open_database`` by default (embedded server in this process);
    ``--db-uri`` uses a server in another process, ``--no-retry-writes`` turns off
    retryable writes, which SecantusDB 0.7.0b3 makes slower with every write past 10,000."""
    if args.db_uri is None and not args.no_retry_writes:
        async with open_database(None, "bench", data) as database:
            yield database.db
        return
    server = EmbeddedServer(data) if args.db_uri is None else None
    uri = await server.start() if server is not None else args.db_uri
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        uri, directConnection=True, tz_aware=True, retryWrites=not args.no_retry_writes
    )
    try:
        await client.drop_database("bench")
        await ensure_indexes(client["bench"])
        yield client["bench"]
    finally:
        await client.close()
        if server is not None:
            await server.stop()


async def _run(
    fake: FakeTelegram, settings: Settings, data: Path, args: argparse.Namespace
) -> None:
    async with _database(data, args) as db, aiohttp.ClientSession() as http:
        channel = TelegramChannel(TOKEN, fake.url, poll_timeout=5)
        channels = {"telegram": channel}
        outbox = Outbox(db, channels, utcnow, poll_seconds=0.5)
        owner = OwnerSettings(db, utcnow, settings.timezone)
        deps = AgentDeps(
            settings=settings, db=db, http=http, outbox=outbox, owner=owner,
            reach=reach(Owners(settings), channels),
        )  # fmt: skip
        dispatcher = Dispatcher(deps, Agent(ScriptedModel(_echo), ToolCatalog()))
        pipeline = Pipeline(
            db, dispatcher.handle, outbox, channels, deps.clock, settings.max_concurrent_model_calls
        )
        await outbox.start()
        await channel.start(pipeline.submit)
        try:
            burst = await _measure(fake, "burst", args.updates, args.chats, rate=None)
            paced = await _measure(fake, "paced", args.updates, args.chats, rate=args.rate)
        finally:
            await channel.stop()
            await pipeline.stop()
            await outbox.stop()
    print(f"{args.updates} updates from {args.chats} chats, per run:")
    burst.show()
    paced.show()
    ok = burst.rate >= 100 and paced.p99 <= 200
    print("targets (burst >= 100 msg/s, paced p99 <= 200 ms):", "met" if ok else "MISSED")


async def _measure(
    fake: FakeTelegram, label: str, count: int, chats: int, rate: float | None
) -> Figures:
    start_sent = len(fake.sent)
    ids: dict[str, int] = {}
    started = time.perf_counter()
    for i in range(count):
        chat = FIRST_CHAT + i % chats
        text = f"{label}-{i}"
        ids[f"ok {text}"] = fake.push_text(chat, text)["update_id"]
        if rate is not None:
            await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.perf_counter()))
    await fake.wait_sent(start_sent + count, within=120)
    sent = fake.sent[start_sent : start_sent + count]
    elapsed = max(s.at for s in sent) - started
    latencies = [(s.at - fake.pushed_at[ids[s.visible]]) * 1000 for s in sent]
    return Figures(label, len(sent), elapsed, latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0, help="arrivals/s in the paced run")
    parser.add_argument(
        "--no-retry-writes",
        action="store_true",
        help="open the database with retryWrites=false (see _database)",
    )
    parser.add_argument("--db-uri", help="a MongoDB/SecantusDB server in another process")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    owners = list(range(FIRST_CHAT, FIRST_CHAT + args.chats))
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, owner_telegram_ids=owners, data_dir=Path(tmp))  # type: ignore[call-arg]
        async with FakeTelegram() as fake:
            await _run(fake, settings, Path(tmp), args)


if __name__ == "__main__":
    run_app_loop(main())
