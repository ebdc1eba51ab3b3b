"""One http check: a GET on a new connection, its answer read at most ``MAX_BODY``
bytes, judged by status and keyword; why it failed in our words or the site's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import aiohttp

from scheduler.monitors.monitor import MAX_BODY, REASON_LIMIT, SITE, USER_AGENT
from storage.outside import Outside
from storage.repos.monitor_record import Monitor, Reason


@dataclass(frozen=True)
class Result:
    ok: bool
    reason: Reason = ""


async def check_http(
    session: aiohttp.ClientSession, monitor: Monitor, limit_seconds: float
) -> Result:
    """One GET of the monitor's URL; never raises (a cancellation aside)."""
    assert monitor.url is not None
    expect = monitor.expect_status
    follow = expect is None or not 300 <= expect < 400
    try:
        async with asyncio.timeout(limit_seconds):
            async with session.get(
                monitor.url, allow_redirects=follow, headers={"User-Agent": USER_AGENT}
            ) as resp:
                status = resp.status
                good = status == expect if expect is not None else 200 <= status < 400
                if not good:
                    wanted = str(expect) if expect is not None else "2xx or 3xx"
                    return Result(False, f"answered HTTP {status}; expected {wanted}")
                if monitor.keyword is None:
                    return Result(True)
                body = bytearray()
                while len(body) < MAX_BODY:
                    chunk = await resp.content.read(MAX_BODY - len(body))
                    if not chunk:
                        break
                    body += chunk
                text = body.decode(resp.charset or "utf-8", errors="replace")
                if monitor.keyword in text:
                    return Result(True)
                return Result(
                    False, f"answered HTTP {status} without the keyword {monitor.keyword!r}"
                )
    except TimeoutError:
        return Result(False, f"no answer within {limit_seconds:g} s")
    except (aiohttp.ClientError, OSError, ValueError, LookupError) as exc:
        detail = (str(exc) or type(exc).__name__)[:REASON_LIMIT]
        unanswered = isinstance(exc, aiohttp.ClientConnectorError)  # no word from the site
        if unanswered and not isinstance(exc, aiohttp.ClientSSLError):
            return Result(False, f"request failed: {detail}")
        return Result(False, Outside(detail, SITE))  # it may quote what the site sent


def down_for_text(span: timedelta) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``, ``1 d 3 h``: how long a monitor was down."""
    seconds = max(0, int(span.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
