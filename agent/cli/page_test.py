"""``watchkeeper page-test``: a test page through the whole ladder as configured (chat,
SMS, call), sent by the running ``watchkeeper run`` (it has the channels), followed here
one line per step, until the owner acknowledges it or ``--wait`` runs out.

It asks the running process over its local HTTP API (``POST /api/page-test``, then
``GET /api/page-test/{code}``) with ``ADMIN_TOKEN``. Exit 0 only when the page reached
the owner and was acknowledged with every configured step working; 1 otherwise, or
when Watchkeeper is not running (the line says how to start it); 2 for a bad setting.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any, TextIO

import aiohttp

from agent.cli.command import cli_command
from agent.config import Settings

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=15)
GRACE = 15.0
"""Seconds past ``--wait`` this command waits for the running process to end the test."""
POLL = 1.0
DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min)?\s*", re.IGNORECASE)


def duration_arg(text: str) -> float:
    """``300``, ``300s`` or ``5m`` as seconds (``argparse`` type)."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 300s or 5m)")
    unit = (match.group(2) or "s").lower()
    return float(match.group(1)) * (60 if unit.startswith("m") else 1)


def local_url(settings: Settings) -> str:
    """The running process's HTTP server, as this machine reaches it."""
    host = settings.http_host
    if host in ("0.0.0.0", "", "::"):  # every address: this machine's own works
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{settings.http_port}"


class NotRunning(Exception):
    """Nothing answers at the HTTP server's address."""


async def page_test(
    settings: Settings,
    *,
    wait: float = 300.0,
    step: float = 60.0,
    out: TextIO | None = None,
    poll: float = POLL,
) -> int:
    """Start a test page on the running process and print its steps; the exit code."""
    stream = out or sys.stdout
    if settings.admin_token is None:
        _err(
            "page-test asks the running watchkeeper over its HTTP API, which needs "
            "ADMIN_TOKEN in .env (at least 16 characters); set it and restart "
            f"`{cli_command()} run`"
        )
        return 2
    base = local_url(settings)
    token = settings.admin_token.get_secret_value()
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers, timeout=REQUEST_TIMEOUT) as session:
        try:
            status, data = await _call(
                session,
                "POST",
                f"{base}/api/page-test",
                {"wait_seconds": wait, "step_seconds": step},
            )
        except NotRunning:
            _err(
                f"watchkeeper is not running (nothing answers at {base}); start it with "
                f"`{cli_command()} run`, then try again"
            )
            return 1
        if status != 202:
            _err(_refused(status, data))
            return 1
        code = str(data.get("code"))
        print(
            f"Test page #{code}: acknowledge it as you would a real alert "
            f"(reply 'ack' or {code}a, or press 4 on the call). Waiting up to {wait:g} s.",
            file=stream,
            flush=True,
        )
        return await _follow(session, f"{base}/api/page-test/{code}", data, wait, poll, stream)


async def _follow(
    session: aiohttp.ClientSession,
    url: str,
    data: dict[str, Any],
    wait: float,
    poll: float,
    stream: TextIO,
) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait + GRACE
    shown = 0
    while True:
        steps = data.get("steps") or []
        for item in steps[shown:]:
            print(f"{item.get('time', '')}  {item.get('line', '')}", file=stream, flush=True)
        shown = max(shown, len(steps))
        if data.get("done"):
            return _verdict(data, stream)
        if loop.time() > deadline:
            print(f"NOT FINISHED: no end reported within {wait:g} s", file=stream)
            return 1
        await asyncio.sleep(poll)
        try:
            status, answer = await _call(session, "GET", url)
        except NotRunning:
            print("LOST: watchkeeper stopped answering during the test", file=stream)
            return 1
        if status == 200:
            data = answer


def _verdict(data: dict[str, Any], stream: TextIO) -> int:
    """The last line: whether the page reached the owner, how it was acknowledged."""
    answered, failed = data.get("answered"), data.get("failed") or []
    if answered and not failed:
        print(f"OK: the page reached you ({answered}).", file=stream)
        return 0
    steps = list(dict.fromkeys(str(line).split(":", 1)[0] for line in failed))
    broken = f"{' and '.join(steps)} failed (above); `{cli_command()} doctor` checks why"
    if answered:
        print(f"PARTLY: the page reached you ({answered}), but {broken}.", file=stream)
        return 1
    if failed:
        print(f"NOT ACKNOWLEDGED: nobody answered the test page, and {broken}.", file=stream)
        return 1
    print("NOT ACKNOWLEDGED: nobody answered the test page.", file=stream)
    return 1


async def _call(
    session: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    try:
        async with session.request(method, url, json=body) as resp:
            try:
                data = await resp.json(content_type=None)
            except ValueError:
                data = {"error": (await resp.text())[:200]}
            return resp.status, data if isinstance(data, dict) else {}
    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
        raise NotRunning(str(exc)) from None


def _refused(status: int, data: dict[str, Any]) -> str:
    error = str(data.get("error") or f"HTTP {status}")
    if status == 401:
        return "the running watchkeeper refused ADMIN_TOKEN (is .env the one it started with?)"
    if status == 404:
        return (
            "the running watchkeeper has no test page (alerting is off, or it is an older version)"
        )
    return f"test page not started: {error}"


def _err(text: str) -> None:
    print(f"watchkeeper: {text}", file=sys.stderr)
