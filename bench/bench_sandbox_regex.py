"""The issue-28 sequence against the embedded database (its own child process). Prints
its figures.

Seven accepted ``db_query`` updates double one string to 256,000 characters; then one
find with the quadratic ``{"$regex": "[a-z]+[0-9]"}``. Meanwhile a probe asks the
database's health (what ``/healthz`` asks) every 0.2 s and a find on another collection
stands in for the owner's next message. Printed: each call's time and outcome, the
probe's worst answer time and the states it saw, and the owner's find.

For comparison, ``--unguarded N`` also sends the quadratic pattern straight to the
database (past the sandbox) on an N-character value, with the sandbox's 4 s limit, and
prints how long the owner's next read then waited.

Run: python bench/bench_sandbox_regex.py [--unguarded 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import pymongo

from agent.config import Settings
from agent.context import AgentDeps
from agent.tools.db import DB_QUERY
from runtime.loop import run as run_app_loop
from storage.db import Database, open_database
from tests.contexts import agent_deps, owner_ctx

Call = dict[str, Any]
START = 2_000
DOUBLE = [{"$set": {"t": "$s"}}, {"$set": {"s": {"$concat": ["$s", "$t"]}}}, {"$unset": "t"}]
HOSTILE = {"$regex": "[a-z]+[0-9]"}


class Probe:
    """Health every 0.2 s, as ``/healthz`` asks it: the worst answer time and the states."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.states: Counter[str] = Counter()
        self.worst = 0.0

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            self.states[await self.database.health()] += 1
            self.worst = max(self.worst, time.perf_counter() - started)
            await asyncio.sleep(0.2)

    def report(self) -> None:
        """Print what the probe saw since the last report, and start again."""
        states = ", ".join(f"{state} x{n}" for state, n in self.states.items())
        print(f"  health probe (what /healthz asks): {states}; worst {self.worst:.3f} s")
        self.states.clear()
        self.worst = 0.0


async def timed(label: str, call: Call, deps: AgentDeps) -> None:
    started = time.perf_counter()
    result = await DB_QUERY.invoke(call, owner_ctx(deps))
    shown = ("error: " + result["error"]) if "error" in result else str(result)
    print(f"  {time.perf_counter() - started:6.2f} s  {label:<34} {shown[:150]}")


async def owner_answer(database: Database) -> float:
    started = time.perf_counter()
    await database.db.ai_owner.find_one({"n": 1})
    return time.perf_counter() - started


async def field_sequence(database: Database, deps: AgentDeps) -> None:
    print("the issue's sequence through db_query:")
    await timed("insertOne (2,000 characters)", {
        "operation": "insertOne", "collection": "ai_t", "data": {"_id": 1, "s": "a" * START},
    }, deps)  # fmt: skip
    for step in range(1, 8):
        await timed(f"updateOne: double it ({START << step:,})", {
            "operation": "updateOne", "collection": "ai_t", "filter": {"_id": 1}, "update": DOUBLE,
        }, deps)  # fmt: skip
    stored = await database.db.ai_t.find_one({"_id": 1})
    print(f"  stored value: {len(stored['s']) if stored else 0:,} characters")
    await timed("find [a-z]+[0-9]", {
        "operation": "find", "collection": "ai_t", "filter": {"s": HOSTILE},
    }, deps)  # fmt: skip
    await timed("find [a-z][0-9] (the advice)", {
        "operation": "find", "collection": "ai_t", "filter": {"s": {"$regex": "[a-z][0-9]"}},
        "projection": {"s": 0},
    }, deps)  # fmt: skip


async def unguarded(database: Database, length: int) -> None:
    print(f"the quadratic pattern sent straight to the database on {length:,} characters:")
    await database.db.ai_raw.insert_one({"_id": 1, "s": "a" * length})
    started = time.perf_counter()
    try:
        with pymongo.timeout(4.0):
            await database.db.ai_raw.find_one({"s": HOSTILE})
        print(f"  answered in {time.perf_counter() - started:.2f} s")
    except pymongo.errors.PyMongoError as exc:
        print(f"  gave up after {time.perf_counter() - started:.2f} s ({type(exc).__name__})")
    given_up = time.perf_counter()
    print(
        f"  the owner's find then took {await owner_answer(database):.2f} s "
        f"({time.perf_counter() - given_up:.2f} s after the call gave up)"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, data_dir=Path(tmp), openai_api_key="x")  # type: ignore[call-arg]
        async with (
            open_database(None, "bench", Path(tmp)) as database,
            aiohttp.ClientSession() as http,
        ):
            deps = agent_deps(settings, database.db, http)
            await database.db.ai_owner.insert_one({"n": 1})
            probe = Probe(database)
            probing = asyncio.create_task(probe.run())
            try:
                await field_sequence(database, deps)
                print(f"  the owner's find afterwards: {await owner_answer(database):.3f} s")
                probe.report()
                if args.unguarded:
                    await unguarded(database, args.unguarded)
                    probe.report()
            finally:
                probing.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unguarded", type=int, default=0, metavar="N")
    run_app_loop(main(parser.parse_args()))
