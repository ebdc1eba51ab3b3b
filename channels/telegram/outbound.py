"""Sending to Telegram: chunking, safe formatting with a plain-text fallback, and error
mapping to ``SendError`` so the outbox knows whether a retry can help.

Telegram refuses messages over 4,096 characters (counted in UTF-16 code units
after entity parsing), so long replies are cut where a reader would cut them:
between paragraphs, then lines, then sentences, then words, and only as a last
resort in the middle of a word.

Models write Markdown; Telegram's Markdown dialects reject much of what models
produce. Everything is therefore HTML-escaped first, and only a few well-formed
constructs (bold, italic, strike, inline code, code blocks, headings, http
links) become tags. Whatever still fails to parse is resent as plain text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import logging
import re
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

from channels.pacing import Lane, PacingClosed
from channels.telegram.flood import TELEGRAM_LIMITS, FloodLimits, FloodPace
from channels.types import (
    PRESS_ANSWER,
    VERBATIM,
    Button,
    OutboundMessage,
    SendError,
    SendResult,
)
from runtime.backoff import Backoff, Pauses

log = logging.getLogger(__name__)

RETRY_AFTER_WAIT_MAX = 5.0
"""A flood-control pause up to this long is waited out in place; longer goes back to
the outbox as a retryable failure."""
FLOOD_BACKOFF = Backoff(first=1.0, cap=RETRY_AFTER_WAIT_MAX, retries=1)
"""One chunk refused by flood control is tried once more, after the pause Telegram
asked for (at most ``RETRY_AFTER_WAIT_MAX``), which the chat's lane waits out."""
REFUSED = (BadRequest, Forbidden, InvalidToken, ChatMigrated, RetryAfter)
"""Answers that delivered nothing: such a send does not count against the limits."""
PROGRESS_KEEP = 256
"""How many partly sent long replies to remember, so a retry skips the sent chunks."""
MAX_LENGTH = 4096
NOTICE_MAX = 200
"""Characters of the notice a button press is answered with (``answerCallbackQuery``)."""

# Where to cut, best first: (separator, characters of it kept at the end of the chunk).
_SEPARATORS: tuple[tuple[str, int], ...] = (
    ("\n\n", 0),
    ("\n", 0),
    (". ", 1),
    ("! ", 1),
    ("? ", 1),
    ("; ", 1),
    (" ", 0),
)

_FENCE = re.compile(r"```[\w+#.-]*\n?(.*?)```", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.DOTALL)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")
_ITALIC_UNDERSCORE = re.compile(r"(?<![\w_])_(?=[^\s_])([^_\n]+?)(?<=\S)_(?![\w_])")


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: characters outside the BMP count twice."""
    return len(text.encode("utf-16-le")) // 2


def _fitting_prefix(text: str, limit: int) -> int:
    """The largest ``n`` such that ``text[:n]`` is at most ``limit`` UTF-16 units."""
    if utf16_length(text[:limit]) <= limit:
        return min(len(text), limit)
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return i
    return len(text)


def _cut(text: str, limit: int) -> tuple[int, int]:
    """Where the next chunk ends and where the remainder starts."""
    fits = _fitting_prefix(text, limit)
    for minimum in (fits // 4, 1):
        for sep, kept in _SEPARATORS:
            # A separator may start right at the limit; what is kept of it must fit.
            at = text.rfind(sep, 0, fits - kept + len(sep))
            if at >= minimum:
                return at + kept, at + len(sep)
    hard = max(1, fits)
    return hard, hard


def split_text(text: str, limit: int = MAX_LENGTH) -> list[str]:
    """Cut ``text`` into chunks of at most ``limit`` UTF-16 units, in order."""
    chunks: list[str] = []
    rest = text.strip("\n").rstrip()
    while utf16_length(rest) > limit:
        end, start = _cut(rest, limit)
        head = rest[:end].rstrip()
        if head:
            chunks.append(head)
        rest = rest[start:].lstrip("\n")
    if rest.strip():
        chunks.append(rest)
    return chunks


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _inline(text: str) -> str:
    """Escape ``text`` and turn simple Markdown emphasis into HTML tags."""
    out = _escape(text)
    # Already escaped: only the quote still needs escaping inside the attribute.
    out = _LINK.sub(lambda m: f'<a href="{m[2].replace(chr(34), "&quot;")}">{m[1]}</a>', out)
    out = _HEADING.sub(r"<b>\1</b>", out)
    out = _BOLD.sub(r"<b>\1</b>", out)
    out = _STRIKE.sub(r"<s>\1</s>", out)
    out = _ITALIC_STAR.sub(r"<i>\1</i>", out)
    return _ITALIC_UNDERSCORE.sub(r"<i>\1</i>", out)


def _convert_outside(
    pattern: re.Pattern[str], text: str, inside: Callable[[str], str], outside: Callable[[str], str]
) -> str:
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        parts.append(outside(text[last : match.start()]))
        parts.append(inside(match[1]))
        last = match.end()
    parts.append(outside(text[last:]))
    return "".join(parts)


def to_html(text: str) -> str:
    """Telegram HTML for ``text``: escaped, with code left exactly as written."""

    def pre(code: str) -> str:
        return f"<pre>{_escape(code.strip(chr(10)))}</pre>"

    def code(snippet: str) -> str:
        return f"<code>{_escape(snippet)}</code>"

    def prose(part: str) -> str:
        return _convert_outside(_INLINE_CODE, part, code, _inline)

    return _convert_outside(_FENCE, text, pre, prose)


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        return _seconds(exc.retry_after)


async def _lane_waits(seconds: float) -> None:
    """``Pauses``' sleep for a flood refusal: nothing to do here, since the refusal left
    the chat's lane that pause (``_cost``), and the lane's turn ends it early when the
    channel stops."""


def _cost(exc: BaseException, gap: float) -> tuple[float, bool]:
    """What a failed ``sendMessage`` leaves its lane: the gap before the chat's next send,
    and whether it counts against the limits. A refusal delivered nothing (a flood
    refusal keeps the chat waiting as long as Telegram asked); anything else (a timeout,
    a dropped connection, an answer we could not read) may have been delivered."""
    if isinstance(exc, RetryAfter):
        return retry_after_seconds(exc), False
    if isinstance(exc, REFUSED):
        return 0.0, False
    return gap, True


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
    """The outbound half of the channel (``TelegramChannel`` is one, and starts and stops
    it); ``describe_error`` renders an error without the token, for logs and
    ``SendError`` texts. Sends are paced to ``limits`` (``channels.telegram.flood``)
    before they take one of the ``slots`` (connections), so a waiting message holds
    none."""

    def __init__(
        self,
        bot: Bot,
        describe_error: Callable[[BaseException], str],
        slots: asyncio.Semaphore,
        limits: FloodLimits = TELEGRAM_LIMITS,
    ) -> None:
        self._bot = bot
        self._describe = describe_error
        self._slots = slots
        self._pace = FloodPace(limits)
        self._progress: dict[str, list[str]] = {}
        self._running = False
        """Whether the channel is up; until it is (and once stopped) a send fails, to be
        retried by the outbox."""

    async def send(self, message: OutboundMessage) -> SendResult:
        """Send ``message`` in chunks of at most 4,096 characters, buttons on the last;
        as plain text when its ``meta`` asks for it ``VERBATIM``.

        If a later chunk fails, a retry of the same message skips the chunks
        already delivered. The chat's lane is held across the chunks: its messages go
        in the order they came, whole, a second apart; other chats go meanwhile. A send
        still waiting its turn when the channel stops fails as retryable.
        """
        if not self._running:
            raise SendError("telegram channel is not running", retryable=True)
        answer = message.meta.get(PRESS_ANSWER)
        if isinstance(answer, dict):
            return await self._answer_press(message, answer)
        chunks = split_text(message.text)
        if not chunks:
            if not message.buttons:
                log.info("empty telegram message %s not sent", message.idempotency_key)
                return SendResult(info={"skipped": "empty text"})
            chunks = ["…"]  # Telegram needs some text to hang the buttons on
        done = self._progress.pop(message.idempotency_key, [])
        markup = _keyboard(message.buttons)
        reply_to = _as_message_id(message.reply_to)
        try:
            async with self._pace.lane(message.chat_id) as lane:
                for i in range(len(done), len(chunks)):
                    last = i == len(chunks) - 1
                    try:
                        sent = await self._send_chunk(
                            lane,
                            message.chat_id,
                            chunks[i],
                            markup if last else None,
                            reply_to if i == 0 else None,
                            verbatim=bool(message.meta.get(VERBATIM)),
                        )
                    except TelegramError as exc:
                        error = self._send_error(exc)
                        if error.retryable and done:
                            self._remember(message.idempotency_key, done)
                        raise error from None
                    done.append(sent)
        except PacingClosed:
            if done:
                self._remember(message.idempotency_key, done)
            raise SendError("telegram channel stopped before its turn", retryable=True) from None
        return SendResult(external_ids=tuple(i for i in done if i))

    def _remember(self, key: str, done: list[str]) -> None:
        self._progress[key] = done
        while len(self._progress) > PROGRESS_KEEP:
            del self._progress[next(iter(self._progress))]

    async def _send_chunk(
        self,
        lane: Lane,
        chat_id: str,
        text: str,
        markup: InlineKeyboardMarkup | None,
        reply_to: int | None,
        *,
        verbatim: bool = False,
    ) -> str:
        """``sendMessage`` for one chunk, as HTML, else (formatting refused, or
        ``verbatim``) as plain text, once ``lane`` (held) and the windows give it a
        turn; a short flood-control pause is waited out once, in the lane.
        The new message's id, "" if the answer is not a message with one (the message
        went: a retry would send it twice).

        Every failure of the request itself reaches us as a ``TelegramError`` (the
        transport's included: ``BaseRequest.post`` wraps whatever else it raises); what
        else ``send_message`` raises comes from reading an answer Telegram accepted.
        """
        params: dict[str, Any] = {"chat_id": chat_id, "reply_markup": markup}
        if reply_to is not None:
            params["reply_parameters"] = ReplyParameters(reply_to, allow_sending_without_reply=True)
        forms: tuple[dict[str, Any], ...] = (
            {"text": to_html(text), "parse_mode": ParseMode.HTML},
            {"text": text},
        )
        form = 1 if verbatim else 0
        flood = Pauses(FLOOD_BACKOFF, sleep=_lane_waits)
        gap = self._pace.limits.chat_gap
        while True:
            try:
                if not lane.take_turn():
                    await lane.turn()
                try:
                    async with self._slots:
                        sent = await self._bot.send_message(**forms[form], **params)
                except BaseException as exc:
                    lane.done(*_cost(exc, gap))
                    raise
                lane.done(gap)
            except RetryAfter as exc:
                wait = retry_after_seconds(exc)
                if flood.exhausted or wait > RETRY_AFTER_WAIT_MAX:
                    raise
                await flood.sleep(wait)  # counted; the lane's next turn waits it out
                continue
            except BadRequest as exc:
                if form or "can't parse entities" not in exc.message.lower():
                    raise
                log.info("telegram rejected the formatting (%s); sending plain text", exc.message)
                form = 1
                continue
            except TelegramError:
                raise
            except (TypeError, KeyError, ValueError, AttributeError) as exc:
                log.warning("telegram accepted a message but gave no id for it: %s", exc)
                return ""
            return str(sent.message_id)

    async def _answer_press(self, message: OutboundMessage, answer: dict[str, Any]) -> SendResult:
        """Answer a button press (``PRESS_ANSWER``): stop its spinner with a short notice,
        then, when it did something, rewrite the message it sat on to add ``text``,
        without its buttons. A message too long to take the words, or one we no longer
        know the text of, only loses its buttons, and the words come as a reply to it;
        one the bot may no longer edit gets them as a reply too. An answer Telegram no
        longer takes (the press is older than its answer window) is not retried: the
        message still says what was done."""
        notice = str(answer.get("notice") or message.text)[:NOTICE_MAX]
        try:
            async with self._slots:
                await self._bot.answer_callback_query(str(answer.get("query_id")), text=notice)
        except BadRequest as exc:
            log.info("telegram refused the answer to a press: %s", self._describe(exc))
        except TelegramError as exc:
            raise self._send_error(exc) from None
        edit = _as_message_id(answer.get("edit"))
        if edit is None:
            return SendResult(info={"answered": notice})
        added = to_html(message.text)
        shown = str(answer.get("shown") or "")
        fits = bool(shown) and utf16_length(shown) + 2 + utf16_length(added) <= MAX_LENGTH
        try:
            async with self._slots:
                if fits:  # the message as it read, and what was done under it
                    await self._bot.edit_message_text(
                        f"{shown}\n\n{added}",
                        chat_id=message.chat_id,
                        message_id=edit,
                        parse_mode=ParseMode.HTML,
                        reply_markup=InlineKeyboardMarkup(()),
                    )
                else:
                    await self._bot.edit_message_reply_markup(
                        chat_id=message.chat_id,
                        message_id=edit,
                        reply_markup=InlineKeyboardMarkup(()),
                    )
        except BadRequest as exc:
            if "not modified" not in exc.message.lower():
                log.info("telegram refused an edit (%s); replying instead", exc.message)
                fits = False
        except TelegramError as exc:
            raise self._send_error(exc) from None
        if fits:
            return SendResult(external_ids=(str(edit),))
        reply = dataclasses.replace(message, meta={}, reply_to=str(edit))
        return await self.send(reply)

    def _send_error(self, exc: TelegramError) -> SendError:
        text = self._describe(exc)
        # Blocked, kicked, a bad chat id or request: trying again cannot help. BadRequest
        # is a NetworkError subclass, so it is checked first.
        if isinstance(exc, Forbidden | InvalidToken | ChatMigrated | BadRequest):
            return SendError(text, retryable=False)
        # RetryAfter, TimedOut, NetworkError (connection failures, 5xx answers), and others.
        wait = retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None
        return SendError(text, retryable=True, retry_after=wait)
