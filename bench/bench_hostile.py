"""Hostile ``db_query`` benchmark (issue 11). Prints its figures.

Runs the issue's hostile calls, and the worst ones the sandbox still allows, through the
``db_query`` tool against the embedded database (in a process of its own, as
``EMBEDDED_DB_SEPARATE_PROCESS`` runs it, so that it can be frozen), then prints
the worst regex call, the worst call, and the peak memory (VmHWM) of this process and of
the database process. One more call runs while the database is frozen (SIGSTOP), to
show the tool still answers within its time limit.

Targets: both processes together under 400 MB; worst call a few seconds at most.

Run: python bench/bench_hostile.py
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import Settings
from agent.context import AgentDeps, RunContext
from agent.tools.db import DB_QUERY
from runtime.loop import run as run_app_loop
from storage.db import open_database
from tests.contexts import agent_deps, owner_ctx

NESTED = r"^(\w+\s?)*$"
WORDS = ["plan", "the", "dentist", "visit", "and", "call", "Ann", "about", "the", "garden"]
Call = dict[str, Any]


def find(collection: str, filter: Call, **more: Any) -> Call:
    return {"operation": "find", "collection": collection, "filter": filter, **more}


def count(collection: str, filter: Call) -> Call:
    return {"operation": "countDocuments", "collection": collection, "filter": filter}


def aggregate(collection: str, *stages: Call) -> Call:
    return {"operation": "aggregate", "collection": collection, "pipeline": list(stages)}


def project(expression: Any) -> Call:
    return {"$project": {"_id": 0, "x": expression}}


def nested(depth: int) -> Call:
    doc: Call = {"leaf": 1}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


def reduce(over: Any, start: Any, step: Any) -> Call:
    return {"$reduce": {"input": over, "initialValue": start, "in": step}}


REGEX = {"$regularExpression": {"pattern": NESTED, "options": ""}}
DOUBLING = reduce({"$range": [0, 20]}, "x" * 8, {"$concat": ["$$value", "$$value"]})
WIDEST_REDUCE = reduce({"$range": [0, 500]}, "", {"$concat": ["$$value", "x" * 20]})
WIDEST_MAP = {"$map": {"input": {"$range": [1000, 1500]}, "in": {"$multiply": ["$$this", 3]}}}
ALIAS = [{"$set": {"b": "$title"}}, {"$set": {"title": {"$concat": ["$title", "$b"]}}}] * 10
SHORT = {"limit": 5, "projection": {"_id": 0, "n": 1}}

# (label, kind, call); kind "regex" counts towards the worst regex time.
CASES: list[tuple[str, str, Call]] = [
    ("^(a+)+$ on a 29-char field", "regex", find("ai_notes", {"s29": {"$regex": "^(a+)+$"}})),
    (f"{NESTED} on 2,000 titles", "regex", find("ai_notes", {"title": {"$regex": NESTED}})),
    ("same, in $in as $regularExpression", "regex", find("ai_notes", {"title": {"$in": [REGEX]}})),
    (
        "same, in $not / $elemMatch / $or",
        "regex",
        find(
            "ai_notes",
            {"$or": [{"title": {"$not": REGEX}}, {"tags": {"$elemMatch": {"$regex": NESTED}}}]},
        ),
    ),
    (
        "same, in $regexMatch in $expr",
        "regex",
        find("ai_notes", {"$expr": {"$regexMatch": {"input": "$title", "regex": NESTED}}}),
    ),
    (
        "same, in $regexFindAll in a pipeline",
        "regex",
        aggregate("ai_notes", project({"$regexFindAll": {"input": "$title", "regex": NESTED}})),
    ),
    (
        r"unanchored \S+@\S+\.\S+ (cubic)",
        "regex",
        count("ai_notes", {"note": {"$regex": r"\S+@\S+\.\S+"}}),
    ),
    (
        r"allowed ^[\w\s]*$ on 2,000 titles",
        "regex",
        find("ai_notes", {"title": {"$regex": r"^[\w\s]*$"}}, **SHORT),
    ),
    (
        r"allowed ^\w+(\s\w+)*$ on 2,000 titles",
        "regex",
        find("ai_notes", {"title": {"$regex": r"^\w+(\s\w+)*$"}}, **SHORT),
    ),
    (
        "allowed (?i)meeting, 2,000 notes of 2,000 chars",
        "regex",
        count("ai_notes", {"note": {"$regex": "(?i)meeting"}}),
    ),
    (
        r"allowed \w+@ (quadratic), 10,000-char value",
        "regex",
        count("ai_long", {"text": {"$regex": r"\w+@"}}),
    ),
    (
        "$reduce doubling a string 20 times (8 MB)",
        "memory",
        aggregate("ai_notes", project(DOUBLING)),
    ),
    (
        "200 rows of 8 MB by $reduce/$concat",
        "memory",
        aggregate("ai_notes", {"$limit": 200}, project(DOUBLING)),
    ),
    ("doubling through an alias, 10 stages", "memory", aggregate("ai_notes", *ALIAS)),
    ("$range of 100,000,000", "memory", aggregate("ai_notes", project({"$range": [0, 10**8]}))),
    (
        "allowed: widest $reduce, 10 KB x 2,000 docs",
        "memory",
        aggregate("ai_notes", project(WIDEST_REDUCE)),
    ),
    (
        "allowed: widest $map over $range, 2,000 docs",
        "memory",
        aggregate("ai_notes", project(WIDEST_MAP)),
    ),
    ("find 20 stored rows of 1 MB", "memory", find("ai_huge", {})),
    ("aggregate 20 stored rows of 1 MB", "memory", aggregate("ai_huge", {"$match": {}})),
    ("find 200 rows of 60 KB (12 MB)", "memory", find("ai_wide", {}, limit=200)),
    ("listCollections with 300 long names", "limits", {"operation": "listCollections"}),
    ("skip 2^64", "limits", find("ai_notes", {}, skip=2**64)),
    ("limit 2^64", "limits", find("ai_notes", {}, limit=2**64)),
    ("$limit 2^70 in a pipeline", "limits", aggregate("ai_notes", {"$limit": 2**70})),
    (
        "insert a document nested 200 deep",
        "limits",
        {"operation": "insertOne", "collection": "ai_deep", "data": nested(200)},
    ),
    ("filter nested 20,000 deep", "limits", find("ai_notes", nested(20_000))),
    ("collection name with a newline", "limits", find("ai_notes\nsystem.users", {})),
]


def memory_mb(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) of ``pid`` in MB: peak and current resident memory."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmHWM"].split()[0]) // 1024, int(fields["VmRSS"].split()[0]) // 1024


def database_pid() -> int:
    """The embedded database: our child process running ``storage.embedded.server``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and "storage.embedded.server" in cmdline:
            return int(entry.name)
    raise RuntimeError("embedded database process not found")


async def seed(deps: AgentDeps) -> None:
    db = deps.db
    notes = [
        {
            "n": i,
            "title": " ".join(WORDS[(i + k) % len(WORDS)] for k in range(9))[:50],
            "note": " ".join(WORDS[(i * k + k // 7) % len(WORDS)] for k in range(400))[:2000],
            "tags": ["home", "work"],
            "s29": "a" * 28 + "!",
        }
        for i in range(2_000)
    ]
    await db.ai_notes.insert_many(notes)
    await db.ai_long.insert_one({"text": "a" * 10_000})
    await db.ai_wide.insert_many([{"n": i, "s": "w" * 60_000} for i in range(200)])
    for i in range(20):
        await db.ai_huge.insert_one({"n": i, "s": "h" * 1_000_000})
    for i in range(300):
        await db.create_collection(f"ai_{i:03d}_" + "c" * 100)


def outcome(result: Call) -> str:
    if "error" in result:
        return "error: " + result["error"][:90]
    text = json.dumps(result)
    rows = result.get("rows", result.get("collections"))
    size = f"{len(rows)} rows, " if isinstance(rows, list) else ""
    note = f"; note: {result['note'][:60]}" if "note" in result else ""
    return f"answered: {size}{len(text):,} chars{note}"


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def busy_for(db_pid: int) -> float:
    """Seconds until the database process uses less than 20% of a core again."""
    started = time.perf_counter()
    while True:
        before = cpu_seconds(db_pid)
        await asyncio.sleep(0.25)
        if cpu_seconds(db_pid) - before < 0.05:
            return time.perf_counter() - started


async def run_cases(ctx: RunContext, db_pid: int) -> None:
    worst: dict[str, tuple[float, str]] = {"regex": (0.0, ""), "all": (0.0, "")}
    for label, kind, call in CASES:
        started = time.perf_counter()
        result = await DB_QUERY.invoke(call, ctx)
        elapsed = time.perf_counter() - started
        print(f"  {elapsed:6.2f} s  {label:<52} {outcome(result)}")
        if "did not finish" in result.get("error", ""):
            busy = await busy_for(db_pid)
            print(f"{'':11}(the database went on with the abandoned work for {busy:.1f} s more)")
        for key in ("all", kind):
            if key in worst and elapsed > worst[key][0]:
                worst[key] = (elapsed, label)

    os.kill(db_pid, signal.SIGSTOP)
    try:
        started = time.perf_counter()
        result = await DB_QUERY.invoke(find("ai_notes", {"n": 1}), ctx)
        stalled = time.perf_counter() - started
    finally:
        os.kill(db_pid, signal.SIGCONT)
    label = "find while the database is frozen (SIGSTOP)"
    print(f"  {stalled:6.2f} s  {label:<52} {outcome(result)}")
    if stalled > worst["all"][0]:
        worst["all"] = (stalled, "find while the database is frozen")

    agent_peak, agent_now = memory_mb(os.getpid())
    db_peak, db_now = memory_mb(db_pid)
    print(f"worst regex call: {worst['regex'][0]:.2f} s ({worst['regex'][1]})")
    print(f"worst call: {worst['all'][0]:.2f} s ({worst['all'][1]}) (target: a few seconds)")
    print(
        f"peak RSS: agent process {agent_peak} MB (now {agent_now}), database process "
        f"{db_peak} MB (now {db_now}), together {agent_peak + db_peak} MB (target < 400 MB)"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, data_dir=Path(tmp), openai_api_key="x")  # type: ignore[call-arg]
        async with (
            open_database(None, "bench", Path(tmp), separate_process=True) as database,
            aiohttp.ClientSession() as http,
        ):
            deps = agent_deps(settings, database.db, http)
            db_pid = database_pid()
            started = time.perf_counter()
            await seed(deps)
            print(
                f"seeded in {time.perf_counter() - started:.1f} s; memory after seeding: agent "
                f"{memory_mb(os.getpid())[0]} MB, database {memory_mb(db_pid)[0]} MB (peaks)"
            )
            await run_cases(owner_ctx(deps), db_pid)


if __name__ == "__main__":
    run_app_loop(main())
