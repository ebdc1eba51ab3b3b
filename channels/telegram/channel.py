"""The Telegram channel: python-telegram-bot's ``Bot`` as a plain Bot API client.

Polling is our own loop rather than PTB's ``Updater``: the Updater confirms an
update (advances the offset) before the application has stored it, so a crash
in between would lose it. Here the offset moves past an update only after the
sink has stored it; until then Telegram keeps offering it, and the inbox's
unique key makes a redelivery harmless. Webhook mode answers 200 only after the
sink returned, for the same reason. A button press (``callback_query``) is stored like a
message and answered once it is handled, with what it did (``channels.types.PRESS_ANSWER``):
the channel does not answer it as it stores it, as a press may be answered only once.

The bot token is part of every Bot API URL. It is never logged: errors are
shown with the token blanked out, and a filter blanks it in the httpx and PTB
log lines that print URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from telegram import Bot, BotCommand, Update
from telegram.constants import ChatAction
from telegram.error import BadRequest, Conflict, InvalidToken, RetryAfter, TelegramError

from channels.telegram.flood import TELEGRAM_LIMITS, FloodLimits
from channels.telegram.inbound import (
    ALLOWED_UPDATES,
    CHANNEL,
    DEFAULT_MAX_BYTES,
    fetch_file,
    to_inbound,
)
from channels.telegram.outbound import TelegramSender, retry_after_seconds
from channels.telegram.request import AiohttpRequest
from channels.types import InboundSink
from channels.webhook_body import READ_TIMEOUT, BodyRefused, read_body
from runtime.backoff import Backoff, Pauses
from runtime.clock import utcnow
from runtime.tasks import stop_task

if TYPE_CHECKING:  # aiohttp.web loads with the HTTP server, after the first long poll
    from aiohttp import web

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.telegram.org"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
POLL_BACKOFF = Backoff(first=1.0, cap=30.0)
"""Waits after a failed set-up, long poll or store of an update: 1 s doubling to 30 s,
back to 1 s after a success."""
MAX_UPDATE_BYTES = 1024 * 1024
"""An update is a message of at most 4,096 characters with its entities: far below this."""
DEFAULT_COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello"),
    ("help", "What I can do"),
    ("status", "What is running"),
    ("reset", "Start a new conversation"),
)


REDACTED_LOGGERS = ("telegram.Bot", "telegram.BaseRequest", "telegram.AiohttpRequest", "httpx")
"""Loggers that write URLs with the token in them: ``AiohttpRequest`` logs every request at
DEBUG (as httpx did at INFO) and PTB logs its base URL at DEBUG. Filters apply only to
the logger they are attached to."""


class TokenRedactor(logging.Filter):
    """Blanks the token out of log records; never fails (a filter error would break the
    HTTP call that logged)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def _clean(self, value: Any) -> Any:
        text = str(value)
        return text.replace(self._token, "<token>") if self._token in text else value

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = self._clean(record.msg)
            if isinstance(record.args, tuple):
                record.args = tuple(self._clean(a) for a in record.args)
        except Exception:
            record.msg, record.args = "(log record withheld: it may contain the token)", ()
        return True

    def attach(self) -> None:
        for name in REDACTED_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def detach(self) -> None:
        for name in REDACTED_LOGGERS:
            logging.getLogger(name).removeFilter(self)


class TelegramChannel(TelegramSender):
    """Long polling by default; webhook mode when ``webhook_url`` is given. Sending is
    the ``TelegramSender`` it is (``channels.telegram.outbound``)."""

    name: str = CHANNEL

    def __init__(
        self,
        token: str,
        base_url: str = DEFAULT_BASE_URL,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        commands: Sequence[tuple[str, str]] = (),
        *,
        poll_timeout: int = 30,
        backoff: Backoff = POLL_BACKOFF,
        clock: Callable[[], datetime] = utcnow,
        pool_size: int = 8,
        read_timeout: float = READ_TIMEOUT,
        media_max_bytes: int = DEFAULT_MAX_BYTES,
        limits: FloodLimits = TELEGRAM_LIMITS,
    ) -> None:
        if not token:
            raise ValueError("a Telegram bot token is required (TELEGRAM_BOT_TOKEN)")
        base = base_url.rstrip("/")
        self._token = token
        self._redact = TokenRedactor(token)
        self._redact.attach()  # before the Bot exists: it logs its URL when built
        self._requests = (
            AiohttpRequest(connection_pool_size=pool_size, read_timeout=15.0),
            AiohttpRequest(connection_pool_size=1),  # the long poll's own
        )
        self._bot = Bot(
            token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            request=self._requests[0],
            get_updates_request=self._requests[1],
        )
        self._webhook_url = webhook_url
        self._read_timeout = read_timeout
        self._media_max_bytes = media_max_bytes
        """Seconds a webhook's whole body may take to arrive."""
        # Without a secret anyone could post updates claiming to be the owner: make one up.
        self._secret = webhook_secret or secrets.token_urlsafe(32)
        merged = {n.lstrip("/"): d for n, d in (*DEFAULT_COMMANDS, *commands)}
        self._commands = [BotCommand(n, d) for n, d in merged.items()]
        self._poll_timeout = poll_timeout
        self._backoff = backoff
        self._clock = clock
        self._sink: InboundSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._offset: int | None = None
        self._ready = False
        self._connected = False
        self._last_update_at: datetime | None = None
        self._stalled: int | None = None
        """The update that could not be stored yet (later ones wait behind it)."""
        self._username: str | None = None
        # At most pool_size API calls in flight; the rest wait here, without the request
        # object's 1 s pool timeout (httpx's pool also scheduled hundreds of waiters in
        # quadratic time; AiohttpRequest's wait is O(1), but the timeout still applies).
        self._slots = asyncio.Semaphore(pool_size)
        super().__init__(self._bot, self._safe, self._slots, limits)

    @property
    def mode(self) -> str:
        return "webhook" if self._webhook_url else "polling"

    def _safe(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {str(exc).replace(self._token, '<token>')}"

    # -- lifecycle -------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Check the token, register commands, then poll (or set the webhook).

        A bad token fails at once; an unreachable Telegram does not stop the app:
        the set-up is retried in the background until it works.
        """
        self._sink = sink
        self._redact.attach()
        self._running = True
        self._pace.open()
        try:
            if not self._ready:
                await self._setup()
        except InvalidToken:
            await self.stop()
            raise RuntimeError("Telegram rejected the bot token (TELEGRAM_BOT_TOKEN)") from None
        except TelegramError as exc:
            log.warning("telegram set-up failed (%s); will keep trying", self._safe(exc))
        if self._webhook_url is None:
            self._task = asyncio.create_task(self._poll_loop(), name="telegram-poll")
        elif not self._ready:
            self._task = asyncio.create_task(self._setup_until_ready(), name="telegram-setup")

    async def _setup(self) -> None:
        for request in self._requests:
            await request.initialize()  # their sessions: no network
        # One round trip before the first poll: the token check (``initialize``: getMe,
        # once), the command menu and the mode together. A refused token fails all three.
        await asyncio.gather(self._bot.initialize(), self._set_commands(), self._set_mode())
        self._username = self._bot.username
        self._ready = self._connected = True
        log.info("telegram bot @%s ready (%s)", self._username, self.mode)

    async def _set_commands(self) -> None:
        try:
            await self._bot.set_my_commands(self._commands)
        except BadRequest as exc:  # a bad command name must not keep the bot deaf
            log.warning("telegram refused the command menu: %s", self._safe(exc))

    async def _set_mode(self) -> None:
        if self._webhook_url is None:
            await self._bot.delete_webhook(drop_pending_updates=False)
        else:
            await self._bot.set_webhook(
                self._webhook_url, secret_token=self._secret, allowed_updates=ALLOWED_UPDATES
            )

    async def _setup_until_ready(self) -> None:
        pauses = Pauses(self._backoff)
        while not self._ready:
            await pauses.sleep()
            try:
                await self._setup()
            except TelegramError as exc:
                log.warning("telegram set-up failed: %s", self._safe(exc))

    async def stop(self) -> None:
        """Cancel the long poll at once, confirm what was stored, close the client.
        Sends still waiting their turn fail as retryable (the outbox keeps them)."""
        self._running = False
        self._pace.close()
        await stop_task(self._task)
        self._task = None
        if self._offset is not None and self._ready and self._webhook_url is None:
            # Tell Telegram what we stored, so a restart is not offered it again.
            with contextlib.suppress(TelegramError, TimeoutError):
                async with asyncio.timeout(2):
                    await self._bot.get_updates(offset=self._offset, limit=1, timeout=0)
        with contextlib.suppress(Exception):
            await self._bot.shutdown()
        self._redact.detach()
        self._connected = self._ready = False

    def status(self) -> dict[str, Any]:
        last = self._last_update_at
        return {
            "mode": self.mode,
            "connected": self._connected,
            "last_update_at": last.isoformat() if last is not None else None,
            "bot": self._username,
            "stalled_on_update": self._stalled,
        }

    # -- inbound ---------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        pauses = Pauses(self._backoff)
        while True:
            try:
                if not self._ready:
                    await self._setup()
                updates = await self._bot.get_updates(
                    offset=self._offset,
                    timeout=self._poll_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                )
            except RetryAfter as exc:  # a failure too: the policy's pause, or what was asked
                await pauses.sleep(retry_after_seconds(exc))
                continue
            except Exception as exc:
                if isinstance(exc, Conflict):  # a webhook was set again, or a second poller
                    self._ready = False
                self._connected = False
                log.warning(
                    "telegram polling failed (%s); retrying in %.1fs",
                    self._safe(exc),
                    pauses.upcoming,
                )
                await pauses.sleep()
                continue
            self._connected = True
            pauses.reset()
            # Chats at once (their inbox writes share one database command,
            # ``storage.coalesce``), each chat's updates in order. ``_take_chat`` retries
            # until stored, so the offset moves past the batch only once all of it is.
            by_chat: dict[int | None, list[Update]] = {}
            for update in updates:
                chat = update.effective_chat
                by_chat.setdefault(chat.id if chat is not None else None, []).append(update)
            await asyncio.gather(*(self._take_chat(u) for u in by_chat.values()))
            if updates:
                self._offset = updates[-1].update_id + 1

    async def _take_chat(self, updates: Sequence[Update]) -> None:
        """Hand one chat's updates to the sink in order, each retried until it is
        stored (or we are stopped)."""
        assert self._sink is not None
        for update in updates:
            self._last_update_at = self._clock()
            message = to_inbound(update, self._clock(), self._media_max_bytes)
            if message is None:
                continue
            pauses = Pauses(self._backoff)
            while True:
                try:
                    await self._sink(message)
                    break
                except Exception:
                    # The sink raises only when the database fails (a message it cannot
                    # store is kept as failed): keep the update until it is stored.
                    self._stalled = update.update_id
                    log.exception("storing telegram update %d failed; retrying", update.update_id)
                    await pauses.sleep()
            self._stalled = None

    async def handle_webhook(self, request: web.Request) -> web.Response:
        """``POST /webhooks/telegram``: 200 only once the update is stored."""
        from aiohttp import web  # loaded: the HTTP server calls this

        if self._sink is None:
            return web.Response(status=503, text="telegram channel not started")
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self._secret.encode()):
            log.warning("telegram webhook call with a wrong secret refused")
            return web.Response(status=403, text="forbidden")
        try:
            raw = await read_body(request, limit=MAX_UPDATE_BYTES, within=self._read_timeout)
        except BodyRefused as exc:  # 413 or 408, not a 400 that reads as a bad update
            return exc.response()
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an update")
            update = Update.de_json(data, self._bot)
        except Exception:
            return web.Response(status=400, text="malformed update")
        self._last_update_at = self._clock()
        message = to_inbound(update, self._clock(), self._media_max_bytes)
        if message is None:
            return web.Response(text="ignored")
        try:
            await self._sink(message)
        except Exception:
            log.exception("storing telegram update %d failed", update.update_id)
            return web.Response(status=500, text="not stored; please retry")
        return web.Response(text="ok")

    async def fetch_media(self, source: Mapping[str, str], max_bytes: int) -> bytes:
        """A file a user sent (``channels.types.MediaSource``)."""
        return await fetch_file(self._bot, source, max_bytes, self._slots, self._safe)

    # -- outbound --------------------------------------------------------------------

    async def typing(self, chat_id: str) -> None:
        if self._slots.locked():
            return  # every connection is busy sending: "typing" would only delay replies
        try:
            async with self._slots:
                await self._bot.send_chat_action(chat_id, ChatAction.TYPING)
        except TelegramError as exc:
            log.debug("typing indicator failed: %s", self._safe(exc))
