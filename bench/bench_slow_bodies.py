"""Slow-body flood against a real ``watchkeeper run`` under systemd's default descriptor
limit (soft 1,024): stalled ``POST /login`` bodies, while the owner raises an alert
through ``/api/alerts`` and it goes out to (a local fake) Telegram.

Two floods: ``one address`` (every stalled client from 127.0.0.2) and ``spread``
(the same number over 50 addresses, 127.0.0.2 to 127.0.0.51), the owner on 127.0.0.1.
Prints how the stalled connections ended (408, refused with 503, reset), when the last
was cut, and what the owner saw: the alert request's status and time, and the time
until Telegram had the alert.

    python bench/bench_slow_bodies.py [--stalled 1100] [--deadline 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import BinaryIO

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from tests.fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402

OWNER = 4101
ADMIN = "slow-bodies-admin-0123456789"
NOFILE = 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def systemd_default_limit() -> None:
    """In the child: the soft descriptor limit a systemd unit gets by default."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(NOFILE, hard), hard))


async def stall(port: int, source: str) -> tuple[str, float]:
    """Headers and part of a login form, then nothing; how it ended and after how long."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return "connect failed", time.monotonic() - started
    try:
        writer.write(
            b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/x-www-form-urlencoded\r\nContent-Length: 500\r\n\r\ntoken=ab"
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 120)
        ended = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"
    except (ConnectionError, OSError):
        ended = "reset"
    except TimeoutError:
        ended = "still open after 120 s"
    finally:
        writer.close()
    return ended, time.monotonic() - started


async def owner_alert(port: int, telegram: FakeTelegram, title: str) -> tuple[str, float, float]:
    """Raise an alert as the owner's monitor does; (status, request s, until Telegram s)."""
    started = time.monotonic()
    status = "error"
    async with aiohttp.ClientSession() as http:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with http.post(
                f"http://127.0.0.1:{port}/api/alerts",
                json={"severity": "info", "title": title},
                headers={"Authorization": f"Bearer {ADMIN}"},
            ) as resp:
                status = str(resp.status)
    answered = time.monotonic() - started
    delivered = float("nan")
    with contextlib.suppress(TimeoutError):
        await telegram.wait_for(lambda: any(title in s.text for s in telegram.sent), 30)
        delivered = time.monotonic() - started
    return status, answered, delivered


async def flood(port: int, telegram: FakeTelegram, stalled: int, sources: list[str]) -> None:
    tasks = [asyncio.create_task(stall(port, sources[i % len(sources)])) for i in range(stalled)]
    await asyncio.sleep(1.0)  # let the flood land before the owner asks
    title = f"disk full ({len(sources)} sources)"
    status, answered, delivered = await owner_alert(port, telegram, title)
    results = await asyncio.gather(*tasks)
    ends = Counter(end for end, _ in results)
    cut = [took for end, took in results if end == "408"]
    print(f"  stalled clients: {stalled} from {len(sources)} address(es)")
    print(f"  how they ended: {dict(ends)}")
    if cut:
        print(f"  408s after: median {statistics.median(cut):.2f} s, last {max(cut):.2f} s")
    print(f"  owner's POST /api/alerts: {status} in {answered:.2f} s; on Telegram after "
          f"{delivered:.2f} s")  # fmt: skip


async def main_async(args: argparse.Namespace, tmp: Path, log: BinaryIO) -> None:
    port = free_port()
    async with FakeTelegram() as telegram:
        env = {k: v for k, v in os.environ.items() if "KEY" not in k and "TOKEN" not in k}
        env.update(
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=telegram.url,
            OPENAI_API_KEY="sk-bench",
            OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",  # no model call is made
            OWNER_TELEGRAM_IDS=str(OWNER),
            ADMIN_TOKEN=ADMIN,
            DATA_DIR=str(tmp / "data"),
            HTTP_PORT=str(port),
            HTTP_READ_TIMEOUT_SECONDS=str(args.deadline),
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent", "run", cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=systemd_default_limit,
        )  # fmt: skip
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(600):
                    with contextlib.suppress(aiohttp.ClientError, OSError):
                        async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                            if resp.status == 200:
                                break
                    await asyncio.sleep(0.1)
                else:
                    raise SystemExit(f"agent not healthy; see {tmp / 'agent.log'}")
            print(f"watchkeeper run, descriptors soft {NOFILE}, body deadline {args.deadline} s")
            print("one address:")
            await flood(port, telegram, args.stalled, ["127.0.0.2"])
            print("spread:")
            await flood(port, telegram, args.stalled, [f"127.0.0.{i}" for i in range(2, 52)])
        finally:
            proc.terminate()
            await proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stalled", type=int, default=1100)
    parser.add_argument("--deadline", type=float, default=3.0)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds the flood
    tmp = Path(tempfile.mkdtemp(prefix="wk-slow-"))
    with open(tmp / "agent.log", "ab") as log:
        asyncio.run(main_async(args, tmp, log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
