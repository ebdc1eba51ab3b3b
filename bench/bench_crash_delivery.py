"""Nothing lost, nothing doubled: replies counted at the Bot API across two ``kill -9``.

The real ``watchkeeper run`` runs as a child process (embedded database) against the
fake Telegram Bot API and a fake OpenAI model that echoes each message after
``--model-seconds`` (both local). 200 messages from 20 chats arrive as a stream; twice,
once replies are flowing, the agent is killed with SIGKILL at a random moment and
started again at once. Afterwards every message's replies are counted at the fake Bot
API: ``lost`` (no reply), ``doubled`` (replies beyond the first), per run; target 0 each.

    python bench/bench_crash_delivery.py [--runs 3] [--model-seconds 0.3] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.config import Settings  # noqa: E402
from tests.fakes.openai_api import FakeOpenAI, words_of  # noqa: E402
from tests.fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402

FIRST_CHAT = 300_000
ECHO = re.compile(r"echo: (m\d+-\d+)\b")


class EchoOpenAI(FakeOpenAI):
    """Chat completions answered after ``delay`` s with the newest user message echoed."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        words = words_of(users[-1]) if users else ""
        await asyncio.sleep(self.delay)
        return web.json_response(self.completion(f"echo: {words[-60:]}"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Agent:
    """The ``watchkeeper run`` child: start (until healthy), kill -9, stop."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd
        self.port = int(env["HTTP_PORT"])
        self.proc: asyncio.subprocess.Process | None = None
        self.log = (cwd / "agent.log").open("ab")

    async def start(self) -> float:
        started = time.monotonic()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "run",
            cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        async with aiohttp.ClientSession() as http:
            while time.monotonic() - started < 60:
                if self.proc.returncode is not None:
                    raise SystemExit(f"agent exited ({self.proc.returncode}); see {self.cwd}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                        if resp.status == 200:
                            return time.monotonic() - started
                await asyncio.sleep(0.05)
        raise SystemExit("agent not healthy within 60 s")

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(30):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.log.close()


def environment(data: Path, telegram: str, model: str, owners: list[int]) -> dict[str, str]:
    """The caller's environment without any Watchkeeper setting, plus the bench's own."""
    ours = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
    env.update(
        DATA_DIR=str(data),
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_API_BASE_URL=telegram,
        OPENAI_API_KEY="sk-bench",
        OPENAI_BASE_URL=model,
        OWNER_TELEGRAM_IDS=",".join(map(str, owners)),
        HTTP_PORT=str(free_port()),
        NO_PROXY="127.0.0.1,localhost",
        PYTHONPATH=str(ROOT),
    )
    return env


async def one_run(args: argparse.Namespace, seed: int, tmp: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    chats = [FIRST_CHAT + i for i in range(args.chats)]
    expected = [f"m{c}-{i}" for i in range(args.messages // args.chats) for c in range(len(chats))]
    async with FakeTelegram() as telegram, EchoOpenAI(args.model_seconds) as model:
        agent = Agent(environment(tmp / "data", telegram.url, model.base_url, chats), tmp)
        await agent.start()

        def answered() -> int:
            return len({m for s in telegram.sent for m in ECHO.findall(s.text)})

        async def until_answered(count: int) -> None:
            await telegram.wait_for(lambda: answered() >= count, args.within)

        async def stream() -> None:
            for key in expected:
                chat = chats[int(key[1:].split("-")[0])]
                telegram.push_text(chat, key)
                await asyncio.sleep(args.gap)

        started = time.monotonic()
        pushing = asyncio.create_task(stream())
        restarts: list[float] = []
        kills: list[float] = []
        try:
            # Each kill once replies are flowing (past a random share of them), then
            # after a random pause, so it lands anywhere in an exchange.
            for share in sorted(rng.uniform(0.15, 0.85) for _ in range(args.kills)):
                await until_answered(int(share * len(expected)))
                await asyncio.sleep(rng.uniform(0.0, args.model_seconds + 0.2))
                kills.append(time.perf_counter())
                await agent.kill()
                restarts.append(await agent.start())
            await pushing
            with contextlib.suppress(TimeoutError):  # counted as lost below
                await until_answered(len(expected))
            elapsed = time.monotonic() - started
            await asyncio.sleep(2.0)  # anything still on its way (a second copy, say)
        finally:
            pushing.cancel()
            await agent.stop()
    replies = Counter(m for s in telegram.sent for m in ECHO.findall(s.text))
    lost = [m for m in expected if replies[m] == 0]
    doubled = {m: n for m, n in replies.items() if n > 1}
    first_at: dict[str, float] = {}
    for sent in telegram.sent:
        for m in ECHO.findall(sent.text):
            first_at.setdefault(m, sent.at)
    # When each doubled reply's first copy reached the Bot API, in ms from the nearest
    # kill (negative: before it; a request on its way at the kill arrives just after).
    near_kill = [
        round(min((first_at[m] - k for k in kills), key=abs, default=0.0) * 1000)
        for m in sorted(doubled)
    ]
    return {
        "seed": seed,
        "model_seconds": args.model_seconds,
        "messages": len(expected),
        "kills": len(restarts),
        "lost": len(lost),
        "doubled": sum(n - 1 for n in doubled.values()),
        "doubled_keys": sorted(doubled),
        "doubled_ms_from_kill": near_kill,
        "lost_keys": lost[:10],
        "seconds": round(elapsed, 1),
        "restart_s": [round(r, 2) for r in restarts],
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model-seconds", type=float, default=0.3)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between arrivals")
    parser.add_argument("--within", type=float, default=180.0, help="seconds to wait for all")
    parser.add_argument("--seed", type=int, default=1, help="first run's seed (kill moments)")
    parser.add_argument("--keep", action="store_true", help="keep each run's directory")
    args = parser.parse_args()
    failed = False
    for n in range(args.runs):
        tmp = Path(tempfile.mkdtemp(prefix="bench-crash-"))
        result = await one_run(args, args.seed + n, tmp)
        failed |= bool(result["lost"] or result["doubled"])
        print(
            f"run {n + 1}: {result['messages']} messages, {args.chats} chats, "
            f"{args.model_seconds:g} s model, {result['kills']} kill -9: "
            f"lost {result['lost']}, doubled {result['doubled']} "
            f"({result['seconds']} s; restart to healthy {result['restart_s']} s)"
        )
        print(json.dumps(result))
        if args.keep or result["lost"] or result["doubled"]:
            print(f"  kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
