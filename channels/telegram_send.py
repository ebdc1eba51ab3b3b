"""Sending to Telegram: chunking, safe formatting with a plain-text fallback, and error
mapping to ``SendError`` so the outbox knows whether a retry can help."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from channels.telegram_format import split_text, to_html
from channels.types import Button, OutboundMessage, SendError, SendResult

log = logging.getLogger(__name__)

RETRY_AFTER_WAIT_MAX = 5.0
"""A flood-control pause up to this long is waited out in place; longer goes back to
the outbox as a retryable failure."""
PROGRESS_KEEP = 256
"""How many partly sent long replies to remember, so a retry skips the sent chunks."""


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        return _seconds(exc.retry_after)


def _keyboard(buttons: Sequence[Button]) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.data)] for b in buttons]
    )


def _as_message_id(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class TelegramSender:
    """The outbound half of the channel; ``describe_error`` renders an error without
    the token, for logs and ``SendError`` texts."""

    def __init__(
        self,
        bot: Bot,
        describe_error: Callable[[BaseException], str],
        slots: asyncio.Semaphore,
    ) -> None:
        self._bot = bot
        self._describe = describe_error
        self._slots = slots
        self._progress: dict[str, list[str]] = {}

    async def send(self, message: OutboundMessage) -> SendResult:
        """Send ``message`` in chunks of at most 4,096 characters, buttons on the last.

        If a later chunk fails, a retry of the same message skips the chunks
        already delivered.
        """
        chunks = split_text(message.text)
        if not chunks:
            if not message.buttons:
                log.info("empty telegram message %s not sent", message.idempotency_key)
                return SendResult(info={"skipped": "empty text"})
            chunks = ["…"]  # Telegram needs some text to hang the buttons on
        done = self._progress.pop(message.idempotency_key, [])
        markup = _keyboard(message.buttons)
        reply_to = _as_message_id(message.reply_to)
        for i in range(len(done), len(chunks)):
            last = i == len(chunks) - 1
            try:
                sent = await self._send_chunk(
                    message.chat_id,
                    chunks[i],
                    markup if last else None,
                    reply_to if i == 0 else None,
                )
            except TelegramError as exc:
                error = self._send_error(exc)
                if error.retryable and done:
                    self._remember(message.idempotency_key, done)
                raise error from None
            done.append(sent)
        return SendResult(external_ids=tuple(i for i in done if i))

    def _remember(self, key: str, done: list[str]) -> None:
        self._progress[key] = done
        while len(self._progress) > PROGRESS_KEEP:
            del self._progress[next(iter(self._progress))]

    async def _send_chunk(
        self,
        chat_id: str,
        text: str,
        markup: InlineKeyboardMarkup | None,
        reply_to: int | None,
    ) -> str:
        """The sent message's id ("" when the answer had none)."""
        params: dict[str, Any] = {"chat_id": chat_id, "reply_markup": markup}
        if reply_to is not None:
            params["reply_parameters"] = ReplyParameters(reply_to, allow_sending_without_reply=True)
        for attempt in range(2):
            try:
                async with self._slots:
                    return await self._send_formatted(text, params)
            except RetryAfter as exc:
                wait = retry_after_seconds(exc)
                if attempt or wait > RETRY_AFTER_WAIT_MAX:
                    raise
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _send_formatted(self, text: str, params: dict[str, Any]) -> str:
        try:
            return await self._send_message(
                {"text": to_html(text), "parse_mode": ParseMode.HTML, **params}
            )
        except BadRequest as exc:
            if "can't parse entities" not in exc.message.lower():
                raise
            log.info("telegram rejected the formatting (%s); sending plain text", exc.message)
        return await self._send_message({"text": text, **params})

    async def _send_message(self, params: dict[str, Any]) -> str:
        """``sendMessage``; the new message's id, "" if the answer is not a message with
        one (the message went: a retry would send it twice).

        Every failure of the request itself reaches us as a ``TelegramError`` (the
        transport's included: ``BaseRequest.post`` wraps whatever else it raises); what
        else ``send_message`` raises comes from reading an answer Telegram accepted.
        """
        try:
            sent = await self._bot.send_message(**params)
        except TelegramError:
            raise
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            log.warning("telegram accepted a message but gave no id for it: %s", exc)
            return ""
        return str(sent.message_id)

    def _send_error(self, exc: TelegramError) -> SendError:
        text = self._describe(exc)
        # Blocked, kicked, a bad chat id or request: trying again cannot help. BadRequest
        # is a NetworkError subclass, so it is checked first.
        if isinstance(exc, Forbidden | InvalidToken | ChatMigrated | BadRequest):
            return SendError(text, retryable=False)
        # RetryAfter, TimedOut, NetworkError (connection failures, 5xx answers), and others.
        wait = retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None
        return SendError(text, retryable=True, retry_after=wait)
