"""``watchkeeper doctor``: what is configured, what is reachable, what is missing.

Every check runs at once and is bounded, so doctor answers within a minute. The report
ends with ``next:`` lines, one per missing step, most urgent first.

MCP: the servers file is read server by server, each command looked up, then each
server started (within the start timeout, at most ``START_LIMIT``), listed and stopped
again. Every problem is a ``[FAIL]`` line naming its server (or the file) with a
``next:`` line saying what to fix, and fails ``doctor``: the agent runs without the
servers, but the setup the owner wrote is broken. No servers file is not a problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import importlib
import os
import re
import shutil
import sys
from base64 import b64encode
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.cli.command import cli_command
from agent.cli.run_lock import run_holder
from agent.config import (
    ConfigError,
    Provider,
    SdkMissing,
    Settings,
    ensure_data_dir,
    install_command,
)
from agent.llm.factory import provider_key
from agent.tools.mcp.client import McpServers, ServerStatus
from agent.tools.mcp.config import (
    HttpServer,
    McpConfigError,
    McpSdkMissing,
    ServerConfig,
    StdioServer,
    survey_mcp_config,
)
from runtime.clock import utcnow
from storage.db import make_client
from storage.embedded.owner import EmbeddedServer, EmbeddedUnavailable
from storage.repos.pairing import PairedOwner, PairingStore, PendingCode

TIMEOUT = aiohttp.ClientTimeout(total=8)
MODEL_LIST_SECONDS = 10.0
DATABASE_SECONDS = 20.0
"""Each check's bound: with the checks run at once, doctor answers within a minute
even when a service accepts the connection and never answers."""
NO_ANSWER = f"no answer within {MODEL_LIST_SECONDS:g} s"
START_LIMIT = 25.0
"""The longest doctor waits for a server to start, whatever MCP_START_TIMEOUT_SECONDS
says: doctor answers within a minute."""
STDERR_MARK = "; its stderr ends: "


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fatal: bool = False
    step: str | None = None
    """What to do about it (a ``next:`` line), when the check knows better than
    ``next_steps``."""


async def check_database(
    settings: Settings,
    also: Callable[[AsyncDatabase[dict[str, Any]]], Awaitable[None]] | None = None,
) -> Check:
    """Ping the database; ``also`` reads from it meanwhile (owners, pending pairings)."""
    embedded = None
    attached = False
    uri = settings.mongodb_uri
    try:
        if uri is None:
            ensure_data_dir(settings.data_dir)
            embedded = EmbeddedServer(
                settings.data_dir, separate_process=settings.embedded_db_separate_process
            )
            uri = await embedded.start()
            attached = not embedded.owner
        client = make_client(uri, embedded=embedded is not None)
        try:
            async with asyncio.timeout(DATABASE_SECONDS):
                await client.admin.command("ping")
                if also is not None:
                    with contextlib.suppress(Exception):  # it answered; what it read is extra
                        await also(client[settings.mongodb_db])
        finally:
            await client.close()
    except (ConfigError, EmbeddedUnavailable) as exc:
        return Check("database", False, str(exc), fatal=True)
    except TimeoutError:
        why = f"no answer within {DATABASE_SECONDS:g} s"
        return Check("database", False, f"unreachable ({why})", fatal=True)
    except Exception as exc:
        return Check("database", False, f"unreachable ({type(exc).__name__})", fatal=True)
    finally:
        if embedded is not None:
            await embedded.stop()
    where = f"embedded in {settings.data_dir}" if settings.mongodb_uri is None else "MongoDB"
    served = ", served by the running watchkeeper" if attached else ""
    return Check("database", True, f"{where}: reachable{served}")


async def check_model(settings: Settings) -> list[Check]:
    """The provider answers and has the configured model (``MODEL``, and ``fallback``
    when set), both asked at once. Not answering is fatal for the model, not for the
    fallback; a model the provider does not have is fatal for either."""
    if settings.llm_provider is None:
        return [Check("model", False, "no model: set GEMINI_API_KEY or OPENAI_API_KEY", True)]
    roles = [("model", settings.llm_provider)]
    if settings.llm_fallback is not None:
        roles.append(("fallback", settings.llm_fallback))
    return list(await asyncio.gather(*(_check_provider(settings, r, p) for r, p in roles)))


class ModelListError(Exception):
    """The provider's model list could not be read; the message says why, in one line."""


async def _check_provider(settings: Settings, role: str, provider: Provider) -> Check:
    fatal = role == "model"
    try:
        key = provider_key(settings, provider)
    except SdkMissing as exc:
        command = install_command(exc.extra)
        step = f"install {provider.capitalize()}'s SDK: {command}, then start again"
        return Check(role, False, f"{provider}: {exc}", fatal=fatal, step=step)
    except ConfigError:
        return Check(role, False, f"{provider}: API key missing", fatal=fatal)
    wanted, setting = (
        (settings.openai_model, "OPENAI_MODEL")
        if provider == "openai"
        else (settings.gemini_model, "GEMINI_MODEL")
    )
    wanted = wanted.removeprefix("models/")  # Gemini's own spelling of a name
    listing = _openai_models if provider == "openai" else _gemini_models
    try:
        async with asyncio.timeout(MODEL_LIST_SECONDS + 2):  # the SDK's own limit, and ours
            models = await listing(settings, key)
    except TimeoutError:
        return Check(role, False, f"{provider}: {NO_ANSWER}", fatal=fatal)
    except ModelListError as exc:
        return Check(role, False, f"{provider}: {exc}", fatal=fatal)
    if models is None:
        return Check(role, True, f"{provider}: reachable (no model list: {wanted} not checked)")
    if not models:
        return Check(role, True, f"{provider}: reachable (empty model list: {wanted} not checked)")
    if wanted in models:
        return Check(role, True, f"{provider}: reachable, {wanted} available")
    close = difflib.get_close_matches(wanted, models, n=5, cutoff=0.3) or sorted(models)[:5]
    return Check(
        role,
        False,
        f"{provider}: model {wanted!r} not found; close: {', '.join(close)}",
        fatal=True,
        step=f"set {setting} to a model {provider} has (close to {wanted!r}: {', '.join(close)})",
    )


async def _openai_models(settings: Settings, key: str) -> list[str] | None:
    """The ids ``models.list`` gives (None: the server has no model list)."""
    await asyncio.to_thread(importlib.import_module, "openai")  # off the event loop
    import openai

    from agent.llm.openai.model import make_client, timed_out

    client = make_client(key, settings.openai_base_url, timeout=MODEL_LIST_SECONDS, max_retries=0)
    try:
        return [model.id async for model in client.models.list()]
    except openai.NotFoundError:
        return None
    except openai.APIStatusError as exc:
        raise ModelListError(f"HTTP {exc.status_code}") from None
    except openai.APIConnectionError as exc:
        raise ModelListError(NO_ANSWER if timed_out(exc) else _unreachable(exc)) from None
    finally:
        await client.close()


async def _gemini_models(settings: Settings, key: str) -> list[str] | None:
    """The names ``models.list`` gives, without ``models/`` (None: no model list)."""
    await asyncio.to_thread(importlib.import_module, "google.genai")  # off the event loop
    import httpx2
    from google import genai
    from google.genai import errors
    from google.genai import types as gt

    client = genai.Client(
        api_key=key,
        http_options=gt.HttpOptions(
            base_url=settings.gemini_base_url or None,
            timeout=int(MODEL_LIST_SECONDS * 1000),
            retry_options=gt.HttpRetryOptions(attempts=1),
        ),
    )
    try:
        pager = await client.aio.models.list(config=gt.ListModelsConfig(page_size=1000))
        return [(model.name or "").removeprefix("models/") async for model in pager]
    except errors.APIError as exc:
        if exc.code == 404:
            return None
        raise ModelListError(f"HTTP {exc.code}") from None
    except (TimeoutError, httpx2.TimeoutException):
        raise ModelListError(NO_ANSWER) from None
    except Exception as exc:  # the transport's own errors (httpx2, aiohttp)
        raise ModelListError(_unreachable(exc)) from None
    finally:
        await client.aio.aclose()


def _unreachable(exc: BaseException) -> str:
    """One short line for a connection that failed (no TLS context, no key)."""
    from agent.llm.openai.model import transport_error

    cause = transport_error(exc)
    if isinstance(cause, aiohttp.ClientConnectorError):
        return f"unreachable (cannot connect to {cause.host}:{cause.port})"
    return f"unreachable ({type(cause).__name__})"


TWILIO_CONSOLE = "console.twilio.com"
TWILIO_KEYS = ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM_NUMBER")
E164 = re.compile(r"\+[1-9]\d{6,14}")


async def _get_json(
    session: aiohttp.ClientSession, url: str, **kw: Any
) -> tuple[int | None, Any, str]:
    """The status (None: no answer), the JSON body (None: not JSON) and a short reason."""
    try:
        async with session.get(url, timeout=TIMEOUT, **kw) as resp:
            try:
                body = await resp.json(content_type=None)
            except ValueError:
                body = None
            return resp.status, body, f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, None, f"unreachable ({type(exc).__name__})"


def _sms_fails(detail: str, step: str) -> Check:
    return Check("sms", False, detail, fatal=True, step=step)


async def check_twilio(settings: Settings, session: aiohttp.ClientSession) -> Check:
    """SMS as the pager uses it, tried live: the account answers to the SID and token
    (an authenticated read), is active, and owns ``TWILIO_FROM_NUMBER``. Twilio set up
    in part, or set up and not working, fails ``doctor``: it would page nobody."""
    sid, token, sender = (
        settings.twilio_account_sid,
        settings.twilio_auth_token,
        settings.twilio_from_number,
    )
    missing = [
        key for key, value in zip(TWILIO_KEYS, (sid, token, sender), strict=True) if not value
    ]
    if len(missing) == len(TWILIO_KEYS):
        return Check("sms", False, "disabled (TWILIO_ACCOUNT_SID/AUTH_TOKEN/FROM_NUMBER unset)")
    if missing or sid is None or token is None or sender is None:
        unset = " and ".join(missing)
        return _sms_fails(
            f"{unset} unset: no SMS can be sent",
            f"set {unset} in .env (from {TWILIO_CONSOLE}), or unset the other TWILIO_ settings",
        )
    base = (settings.twilio_api_base_url or "https://api.twilio.com").rstrip("/")
    secret = token.get_secret_value()
    auth = {"Authorization": "Basic " + b64encode(f"{sid}:{secret}".encode()).decode()}
    account = f"{base}/2010-04-01/Accounts/{sid}"
    status, body, reason = await _get_json(session, f"{account}.json", headers=auth)
    if status is None:
        return _sms_fails(
            f"Twilio: {reason}",
            "Twilio cannot be reached from here: check the network (and TWILIO_API_BASE_URL "
            "if set); until it can, no SMS or call can page you",
        )
    if status in (401, 403, 404):
        return _sms_fails(
            f"Twilio refused TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN ({reason})",
            f"copy the Account SID and Auth Token from {TWILIO_CONSOLE} into .env again",
        )
    if status != 200:
        return _sms_fails(f"Twilio: {reason}", f"Twilio answers {reason}: try again later")
    state = body.get("status") if isinstance(body, dict) else None
    if state not in (None, "active"):
        return _sms_fails(
            f"Twilio: the account is {state}", f"reactivate the Twilio account at {TWILIO_CONSOLE}"
        )
    if not E164.fullmatch(sender):
        return Check("sms", True, f"Twilio: reachable, account active (sender {sender} as set)")
    status, body, reason = await _get_json(
        session,
        f"{account}/IncomingPhoneNumbers.json",
        params={"PhoneNumber": sender},
        headers=auth,
    )
    numbers = body.get("incoming_phone_numbers") if isinstance(body, dict) else None
    if status != 200 or not isinstance(numbers, list):
        return _sms_fails(
            f"Twilio: could not list the account's numbers ({reason})",
            f"check at {TWILIO_CONSOLE} that TWILIO_FROM_NUMBER {sender} is the account's",
        )
    if not any(isinstance(n, dict) and n.get("phone_number") == sender for n in numbers):
        return _sms_fails(
            f"Twilio: TWILIO_FROM_NUMBER {sender} is not a number of this account",
            f"set TWILIO_FROM_NUMBER to one of the account's numbers ({TWILIO_CONSOLE}, "
            "Phone Numbers)",
        )
    return Check("sms", True, f"Twilio: reachable, account active, {sender} is its number")


def check_calls(settings: Settings) -> Check:
    """Phone calls for critical alerts: on, or off and why. Calls wanted (Twilio and
    ``OWNER_PHONE`` set, ``TWILIO_VOICE_CALLS`` not off) without ``PUBLIC_BASE_URL`` fail:
    the owner expects a call that cannot come."""
    from agent.alerts.calls import calls_off_reason

    reason = calls_off_reason(settings)
    if reason is not None:
        wanted = reason.startswith("PUBLIC_BASE_URL")  # its next: step is the SMS webhook's
        return Check("calls", False, f"off: {reason}", fatal=wanted)
    minutes = f"{settings.alert_call_after_minutes:g}"
    return Check("calls", True, f"on: an unacknowledged critical alert rings after {minutes} min")


def check_whatsapp(settings: Settings) -> Check:
    if not settings.whatsapp_enabled:
        return Check("whatsapp", False, "disabled (WHATSAPP_ENABLED)")
    session = settings.whatsapp_session_path
    if not session.exists():
        detail = "enabled but not linked: run  watchkeeper whatsapp link"
        return Check("whatsapp", False, detail, fatal=True)
    if not settings.owner_phone:
        detail = "linked, but OWNER_PHONE is unset: nobody is the owner"
        step = "set OWNER_PHONE to your own number (E.164, like +4915112345678)"
        return Check("whatsapp", False, detail, fatal=True, step=step)
    return Check("whatsapp", True, f"linked (session in {session})")


async def check_telegram(settings: Settings, session: aiohttp.ClientSession) -> Check:
    """The bot answers ``getMe`` with this token; a token refused or a Bot API out of
    reach fails ``doctor``."""
    if settings.telegram_bot_token is None:
        return Check("telegram", False, "disabled (TELEGRAM_BOT_TOKEN unset)")
    token = settings.telegram_bot_token.get_secret_value()
    status, _, reason = await _get_json(
        session, f"{settings.telegram_api_base_url}/bot{token}/getMe"
    )
    if status == 200:
        return Check("telegram", True, "reachable")
    if status in (401, 404):
        step = "Telegram refused TELEGRAM_BOT_TOKEN: copy it again from @BotFather (/mybots)"
    elif status is None:
        step = "the Telegram Bot API cannot be reached from here: check the network"
    else:
        step = f"the Telegram Bot API answers {reason}: try again later"
    return Check("telegram", False, reason, fatal=True, step=step)


async def check_channels(settings: Settings, session: aiohttp.ClientSession) -> list[Check]:
    checks = [await check_telegram(settings, session), await check_twilio(settings, session)]
    if settings.twilio_account_sid and not settings.owner_phone:
        step = "set OWNER_PHONE to your mobile number (E.164, like +4915112345678)"
        detail = "OWNER_PHONE unset: SMS alerts have nowhere to go"
        checks.append(Check("sms", False, detail, fatal=True, step=step))
    if settings.twilio_account_sid and not settings.public_base_url:
        detail = "PUBLIC_BASE_URL unset: inbound SMS (the Twilio webhook) refused"
        checks.append(Check("sms", False, detail, fatal=True))
    checks.append(check_calls(settings))
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


async def check_mcp(settings: Settings) -> list[Check]:
    survey = survey_mcp_config(settings)
    path = survey.path
    if path is None:
        return [Check("mcp", False, "no servers (MCP_CONFIG unset and no DATA_DIR/mcp.json)")]
    whole = [p for p in survey.problems if p.server is None]
    if whole and isinstance(whole[0], McpSdkMissing):
        step = f"install the MCP SDK: {install_command('mcp')}, then start again"
        return [Check("mcp", False, str(whole[0]), True, step)]
    if whole:  # unreadable, not JSON, not an "mcpServers" object
        problem = str(whole[0])
        return [Check("mcp", False, problem, True, f"fix the MCP servers file: {problem}")]
    count = len(survey.servers) + len(survey.problems)
    checks = [_summary(path, count, len(survey.problems))]
    checks += [_config_problem(path, p) for p in survey.problems]
    startable: list[ServerConfig] = []
    for config in survey.servers:
        if isinstance(config, StdioServer) and _find_command(config) is None:
            checks.append(_missing_command(path, config))
        else:
            startable.append(config)
    if startable:
        log_dir = settings.data_dir / "mcp-logs"
        found = await _start(
            startable, min(settings.mcp_start_timeout_seconds, START_LIMIT), log_dir
        )
        by_name = {c.name: c for c in startable}
        checks += [_started(path, by_name[s.name], s, log_dir) for s in found]
    return checks


def _summary(path: Path, count: int, wrong: int) -> Check:
    if not wrong:
        return Check("mcp", True, f"{count} server(s) in {path}")
    return Check(
        "mcp",
        False,
        f"{count} server(s) in {path}; while {wrong} of them is wrong, none starts",
        fatal=True,
    )


def _config_problem(path: Path, problem: McpConfigError) -> Check:
    name = problem.server or "?"
    detail = str(problem).removeprefix(f"{path}: server {name!r}: ")
    if problem.variable is not None:
        step = (
            f"set {problem.variable} (in the environment or .env): "
            f"MCP server {name} uses ${{{problem.variable}}}"
        )
    else:
        step = f"fix MCP server {name} in {path}: {detail}"
    return Check(f"mcp {name}", False, detail, True, step)


def _find_command(config: StdioServer) -> str | None:
    """Where the server's command is, looked up as it would be started (its own PATH
    first, when its env sets one)."""
    search = config.env.get("PATH", os.environ.get("PATH", os.defpath))
    if config.cwd and os.sep in config.command and not os.path.isabs(config.command):
        return shutil.which(os.path.join(config.cwd, config.command))
    return shutil.which(config.command, path=search)


def _missing_command(path: Path, config: StdioServer) -> Check:
    return Check(
        f"mcp {config.name}",
        False,
        f"stdio: command not found: {config.command}",
        fatal=True,
        step=f'install {config.command}, or put its full path in the "command" of MCP '
        f"server {config.name} in {path}",
    )


async def _start(configs: list[ServerConfig], timeout: float, log_dir: Path) -> list[ServerStatus]:  # noqa: ASYNC109
    servers = McpServers(configs, start_timeout=timeout, log_dir=log_dir)
    try:
        await servers.start()
        return servers.status()
    finally:
        await servers.stop()


def _started(path: Path, config: ServerConfig, status: ServerStatus, log_dir: Path) -> Check:
    name = f"mcp {status.name}"
    if status.state == "connected":
        return Check(name, True, f"{status.transport}: connected, {status.tools} tools")
    error = status.error or f"still {status.state}"
    why = error.split(STDERR_MARK, 1)[0]
    if isinstance(config, HttpServer):
        step = (
            f"MCP server {status.name} does not answer at {config.url} ({why}): check that "
            f"it runs, and its url and headers in {path}"
        )
    else:
        step = (
            f"MCP server {status.name} does not start ({why}): see what it wrote in "
            f"{log_dir / (status.name + '.log')}"
        )
    return Check(name, False, f"{status.transport}: {error}", True, step)


@dataclass
class Owners:
    """Who owns the bot on Telegram, as the database says (``loaded`` once read)."""

    paired: list[PairedOwner] = field(default_factory=list)
    pending: list[PendingCode] = field(default_factory=list)
    loaded: bool = False

    async def load(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        store = PairingStore(db, utcnow)
        self.paired, self.pending = await store.owners(), await store.pending()
        self.loaded = True


def owner_detail(settings: Settings, owners: Owners) -> tuple[bool, str]:
    """The ``owner`` line: (ok, text)."""
    known = [f"{i} (OWNER_TELEGRAM_IDS)" for i in settings.owner_telegram_ids]
    known += [
        f"{o.who()}, paired" for o in owners.paired if o.user_id not in settings.owner_telegram_ids
    ]
    if known:
        return True, "Telegram: " + ", ".join(known)
    if not owners.loaded:
        return False, "Telegram: none in OWNER_TELEGRAM_IDS (paired owners unknown: no database)"
    if owners.pending:
        return False, "Telegram: none yet; " + "; ".join(
            p.command(cli_command()) for p in owners.pending
        )
    return False, "Telegram: none yet (no OWNER_TELEGRAM_IDS, nobody paired)"


def next_steps(settings: Settings, checks: Sequence[Check], owners: Owners) -> list[str]:
    """What to do next, one line each, most urgent first; empty when nothing is missing."""
    failed = {c.name: c.detail for c in checks if not c.ok}
    steps: list[str] = []
    if "database" in failed:
        where = "MONGODB_URI" if settings.mongodb_uri else "DATA_DIR (embedded database)"
        steps.append(f"fix the database: {failed['database']} (check {where})")
    if settings.llm_provider is None:
        steps.append(
            "put a model key in .env: OPENAI_API_KEY=sk-... (or GEMINI_API_KEY=...), "
            "then start again"
        )
    elif "model" in failed:
        steps.append(
            f"the model does not answer ({failed['model']}): check the key and base URL "
            f"of {settings.llm_provider.upper()}_API_KEY / {settings.llm_provider.upper()}_BASE_URL"
        )
    telegram = settings.telegram_bot_token is not None
    if not telegram and not settings.whatsapp_enabled and not settings.twilio_account_sid:
        steps.append(
            "to chat from your phone, set TELEGRAM_BOT_TOKEN (from @BotFather on Telegram); "
            "meanwhile `watchkeeper chat` talks in the terminal"
        )
    has_owner = bool(settings.owner_telegram_ids or owners.paired)
    if telegram and not has_owner:
        if owners.pending:
            steps.extend(p.command(cli_command()) for p in owners.pending)
        else:
            cli = cli_command()
            steps.append(
                f"with `{cli} run` up, write to your bot on Telegram, then run "
                f"`{cli} pair CODE` with the code it answers"
            )
    if settings.twilio_account_sid and not settings.public_base_url:
        steps.append(
            "set PUBLIC_BASE_URL to this server's public https URL, so Twilio's webhook "
            "(inbound SMS) is accepted"
        )
    if settings.whatsapp_enabled and not settings.whatsapp_session_path.exists():
        steps.append("link WhatsApp: run `watchkeeper whatsapp link` and scan the QR code")
    return steps


def unreadable_settings(error: ConfigError) -> str:
    """The report when the settings themselves are wrong: a ``[FAIL]`` line per bad
    setting and a ``next:`` line each, as for any other part (nothing else can be checked
    before they load)."""
    problems = error.problems or (("settings", str(error)),)
    lines = [f"[FAIL] settings: {name}: {why}" for name, why in problems]
    lines.append(f"{len(problems)} fatal problem(s); the other checks run once the settings load")
    lines += [f"next: fix {name} in .env (or the environment): {why}" for name, why in problems]
    return "\n".join(lines) + "\n"


async def doctor(settings: Settings) -> int:
    owners = Owners()
    async with aiohttp.ClientSession() as session:
        database, models, channels, mcp = await asyncio.gather(
            check_database(settings, also=owners.load),
            check_model(settings),
            check_channels(settings, session),
            check_mcp(settings),
        )
    checks = [database, *models, *channels]
    checks += mcp
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
    steps = next_steps(settings, [c for c in checks if c.step is None], owners)
    steps += [c.step for c in checks if c.step is not None and not c.ok]
    lines.extend(f"next: {step}" for step in steps)
    if not steps:
        holder = run_holder(settings.data_dir)
        if holder is not None:
            lines.append(f"next: nothing missing; Watchkeeper is running ({holder})")
        else:
            lines.append(
                f"next: nothing missing; `{cli_command()} run` starts everything configured"
            )
    # One write at the end: log lines (stderr) never land inside the report.
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 1 if fatal else 0
