"""``watchkeeper doctor``: what is configured, what is reachable, what is missing."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from base64 import b64encode
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.cli.doctor_mcp import check_mcp
from agent.cli.doctor_steps import Owners, next_steps, owner_detail
from agent.config import ConfigError, Settings, ensure_data_dir
from storage.db import make_client
from storage.embedded import EmbeddedServer, EmbeddedUnavailable

TIMEOUT = aiohttp.ClientTimeout(total=8)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fatal: bool = False


async def _http_ok(session: aiohttp.ClientSession, url: str, **kw: object) -> tuple[bool, str]:
    try:
        async with session.get(url, timeout=TIMEOUT, **kw) as resp:  # type: ignore[arg-type]
            if resp.status == 200:
                return True, "reachable"
            return False, f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return False, f"unreachable ({type(exc).__name__})"


async def check_database(
    settings: Settings,
    also: Callable[[AsyncDatabase[dict[str, Any]]], Awaitable[None]] | None = None,
) -> Check:
    """Ping the database; ``also`` reads from it meanwhile (owners, pending pairings)."""
    embedded = None
    uri = settings.mongodb_uri
    try:
        if uri is None:
            ensure_data_dir(settings.data_dir)
            embedded = EmbeddedServer(settings.data_dir)
            uri = await embedded.start()
        client = make_client(uri, embedded=embedded is not None)
        try:
            await client.admin.command("ping")
            if also is not None:
                with contextlib.suppress(Exception):  # it answered; what it read is extra
                    await also(client[settings.mongodb_db])
        finally:
            await client.close()
    except (ConfigError, EmbeddedUnavailable) as exc:
        return Check("database", False, str(exc), fatal=True)
    except Exception as exc:
        return Check("database", False, f"unreachable ({type(exc).__name__})", fatal=True)
    finally:
        if embedded is not None:
            await embedded.stop()
    where = f"embedded in {settings.data_dir}" if settings.mongodb_uri is None else "MongoDB"
    return Check("database", True, f"{where}: reachable")


async def check_model(settings: Settings, session: aiohttp.ClientSession) -> list[Check]:
    checks = []
    if settings.llm_provider is None:
        return [Check("model", False, "no model: set GEMINI_API_KEY or OPENAI_API_KEY", True)]
    for role, name in (("model", settings.llm_provider), ("fallback", settings.llm_fallback)):
        if name is None:
            continue
        if name == "openai":
            key = settings.openai_api_key
            base = (settings.openai_base_url or "https://api.openai.com/v1").rstrip("/")
            url, headers = (
                base + "/models",
                {"Authorization": f"Bearer {key.get_secret_value() if key else ''}"},
            )
        else:
            key = settings.gemini_api_key
            base = settings.gemini_base_url or "https://generativelanguage.googleapis.com"
            base = base.rstrip("/")
            url, headers = (
                base + "/v1beta/models",
                {"x-goog-api-key": key.get_secret_value() if key else ""},
            )
        keyless_ok = name == "openai" and settings.openai_base_url is not None
        if key is None and not keyless_ok:
            checks.append(Check(role, False, f"{name}: API key missing", fatal=role == "model"))
            continue
        ok, detail = await _http_ok(session, url, headers=headers)
        # The model not answering is a problem (a bad key, a wrong URL); the fallback not.
        checks.append(Check(role, ok, f"{name}: {detail}", fatal=role == "model"))
    return checks


async def check_twilio(settings: Settings, session: aiohttp.ClientSession) -> Check:
    sid, token = settings.twilio_account_sid, settings.twilio_auth_token
    if not (sid and token and settings.twilio_from_number):
        return Check("sms", False, "disabled (TWILIO_ACCOUNT_SID/AUTH_TOKEN/FROM_NUMBER unset)")
    base = (settings.twilio_api_base_url or "https://api.twilio.com").rstrip("/")
    secret = token.get_secret_value()
    ok, detail = await _http_ok(
        session,
        f"{base}/2010-04-01/Accounts/{sid}.json",
        headers={"Authorization": "Basic " + b64encode(f"{sid}:{secret}".encode()).decode()},
    )
    return Check("sms", ok, f"Twilio: {detail}")


def check_whatsapp(settings: Settings) -> Check:
    if not settings.whatsapp_enabled:
        return Check("whatsapp", False, "disabled (WHATSAPP_ENABLED)")
    session = settings.whatsapp_session_path
    if not session.exists():
        return Check("whatsapp", False, "enabled but not linked: run  watchkeeper whatsapp link")
    if not settings.owner_phone:
        return Check("whatsapp", False, "linked, but OWNER_PHONE is unset: nobody is the owner")
    return Check("whatsapp", True, f"linked (session in {session})")


async def check_channels(settings: Settings, session: aiohttp.ClientSession) -> list[Check]:
    checks = []
    if settings.telegram_bot_token is None:
        checks.append(Check("telegram", False, "disabled (TELEGRAM_BOT_TOKEN unset)"))
    else:
        token = settings.telegram_bot_token.get_secret_value()
        ok, detail = await _http_ok(session, f"{settings.telegram_api_base_url}/bot{token}/getMe")
        checks.append(Check("telegram", ok, detail))
    checks.append(await check_twilio(settings, session))
    if settings.twilio_account_sid and not settings.owner_phone:
        checks.append(Check("sms", False, "OWNER_PHONE unset: SMS alerts have nowhere to go"))
    if settings.twilio_account_sid and not settings.public_base_url:
        checks.append(
            Check("sms", False, "PUBLIC_BASE_URL unset: inbound SMS (the Twilio webhook) refused")
        )
    checks.append(check_whatsapp(settings))
    checks.append(
        Check(
            "web_search",
            settings.brave_api_key is not None,
            "configured" if settings.brave_api_key else "disabled (BRAVE_API_KEY unset)",
        )
    )
    checks.append(
        Check(
            "admin api",
            settings.admin_token is not None,
            "enabled"
            if settings.admin_token
            else "disabled (ADMIN_TOKEN unset: /api/* answers 503)",
        )
    )
    return checks


async def doctor(settings: Settings) -> int:
    owners = Owners()
    async with aiohttp.ClientSession() as session:
        database, models, channels, mcp = await asyncio.gather(
            check_database(settings, also=owners.load),
            check_model(settings, session),
            check_channels(settings, session),
            check_mcp(settings),
        )
    checks = [database, *models, *channels, *(Check(*c) for c in mcp)]
    if settings.telegram_bot_token is not None:  # right after the telegram line
        at = next(i for i, c in enumerate(checks) if c.name == "telegram") + 1
        checks.insert(at, Check("owner", *owner_detail(settings, owners)))
    bind = f"{settings.http_host}:{settings.http_port}"
    lines = [f"settings: ok (timezone {settings.timezone}, http {bind})"]
    for check in checks:
        mark = "ok  " if check.ok else ("FAIL" if check.fatal else "--  ")
        lines.append(f"[{mark}] {check.name}: {check.detail}")
    fatal = [c for c in checks if c.fatal and not c.ok]
    if fatal:
        lines.append(f"{len(fatal)} fatal problem(s)")
    steps = next_steps(settings, checks, owners)
    lines.extend(f"next: {step}" for step in steps)
    if not steps:
        lines.append("next: nothing missing; `watchkeeper run` starts everything configured")
    # One write at the end: log lines (stderr) never land inside the report.
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 1 if fatal else 0
