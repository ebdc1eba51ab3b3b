"""A fake Telegram Bot API on 127.0.0.1, spoken to by the real python-telegram-bot.

Routes are ``POST /bot<token>/<method>`` with form-encoded (as PTB sends them) or JSON
bodies; answers are ``{"ok": true, "result": ...}`` or Telegram's error envelope.
``getUpdates`` long-polls like the real one: it waits up to ``timeout`` seconds for an
update, and an ``offset`` confirms (removes) every update below it.

Buttons as Telegram has them: ``reply_markup`` kept with each sent message,
``push_callback`` presses one (a ``callback_query`` update carrying the message as it
reads now, a new query id per press), ``answerCallbackQuery`` takes one answer per
query (a second is refused as Telegram refuses it), and ``editMessageText`` /
``editMessageReplyMarkup`` change a sent message (its text, its keyboard; an edit
that changes nothing is refused with "message is not modified").

``sendMessage`` is checked the way Telegram checks it: empty text, more than
4,096 characters after entity parsing, and malformed or unknown HTML tags are
refused with 400. Failures can be scripted per method, and ``reject_html``
refuses every HTML message with "can't parse entities".

With ``flood`` set (``FloodRules``, Telegram's published limits by default), it keeps
them as Telegram does: a ``sendMessage`` arriving while the bot has had 30 messages
accepted in the last second, or its chat one in the last second, or its group (a
negative chat id) 20 in the last minute, is refused with 429 and
``parameters.retry_after`` (whole seconds until it would pass), recorded in
``refusals``. Times are the fake's own (``time.perf_counter()`` as each request arrives,
``Sent.at``); only accepted messages count.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import html
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.fakes.telegram_files import TelegramFiles
from tests.waiting import WATCHDOG

Json = dict[str, Any]
TOKEN = "123456789:AAFakeTokenForTests-xyz"
BOT_ID = 123456789
ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "a", "span",
     "tg-spoiler", "tg-emoji", "blockquote"}
)  # fmt: skip


@dataclass
class Sent:
    """One accepted ``sendMessage``."""

    chat_id: str
    text: str
    parse_mode: str | None
    reply_markup: Json | None
    reply_to: int | None
    message_id: int
    at: float  # time.perf_counter() when the request arrived (the flood limits' clock)

    @property
    def visible(self) -> str:
        """The text a user sees (tags removed and entities decoded in HTML mode)."""
        return _visible_text(self.text) if self.parse_mode == "HTML" else self.text

    @property
    def button_data(self) -> list[str]:
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [b["callback_data"] for row in rows for b in row]

    @property
    def button_labels(self) -> list[str]:
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [b["text"] for row in rows for b in row]


@dataclass(frozen=True)
class Answer:
    """One ``answerCallbackQuery`` Telegram took: the press it answers and the notice."""

    query_id: str
    text: str | None
    show_alert: bool


@dataclass(frozen=True)
class Edit:
    """One accepted edit: which message, its new text (None when only the keyboard
    changed) and its keyboard after the edit."""

    method: str
    message_id: int
    text: str | None
    reply_markup: Json | None


@dataclass(frozen=True)
class FloodRules:
    """The limits the fake keeps in flood mode: Telegram's by default."""

    per_bot: int = 30
    bot_period: float = 1.0
    chat_gap: float = 1.0
    per_group: int = 20
    group_period: float = 60.0


@dataclass(frozen=True)
class Refusal:
    """A ``sendMessage`` refused with 429: to which chat, when it arrived, which limit
    it broke (``bot``, ``chat``, ``group``) and the ``retry_after`` answered."""

    chat_id: str
    at: float
    limit: str
    retry_after: int


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None


class _TelegramHTML(HTMLParser):
    """Checks tags the way Telegram does: known tags only, properly nested."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            self.error = self.error or f'Unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.error = self.error or f'Unmatched end tag "{tag}"'

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _check_html(text: str) -> tuple[str, str | None]:
    parser = _TelegramHTML()
    parser.feed(text)
    parser.close()
    if parser.stack and parser.error is None:
        parser.error = f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
    return "".join(parser.text), parser.error


def _visible_text(text: str) -> str:
    return html.unescape(_check_html(text)[0])


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


JSON_FIELDS = frozenset(
    {"reply_markup", "reply_parameters", "allowed_updates", "commands", "chat_id", "offset",
     "limit", "timeout", "message_id"}
)  # fmt: skip


def _decode(name: str, value: str) -> Any:
    """PTB sends lists, objects and numbers JSON-encoded inside form fields."""
    if name in JSON_FIELDS:
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: Json = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)


class FakeTelegram:
    def __init__(self, token: str = TOKEN, username: str = "watchkeeper_test_bot") -> None:
        self.token = token
        self.username = username
        self.calls: list[tuple[str, Json]] = []
        self.sent: list[Sent] = []
        self.chat_actions: list[tuple[str, str]] = []
        self.commands: list[Json] = []
        self.webhook: Json | None = None
        self.answered_callbacks: list[str] = []
        self.answers: list[Answer] = []
        self.edits: list[Edit] = []
        self._query_ids = itertools.count(1)
        self.confirmed: list[int] = []
        self.handed_out: list[int] = []
        """Update ids of ``getUpdates`` answers written out in full to the bot."""
        self.pending: list[Json] = []
        self.pushed_at: dict[int, float] = {}
        self.failures: dict[str, deque[Failure | None]] = {}
        self.reject_html = False
        self.answer_without_ids = False  # sendMessage answers without a message_id
        self.hanging: set[str] = set()  # methods that do nothing and never answer
        self.hang_after_delivery = False  # sendMessage delivers, then never answers
        self.flood: FloodRules | None = None  # keep Telegram's flood limits (429s)
        self.refusals: list[Refusal] = []
        self._bot_sends: list[float] = []
        self._chat_sends: dict[str, list[float]] = {}
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._server: TestServer | None = None
        self.files = TelegramFiles(token)  # getFile and /file/bot<token>/<path>
        self._methods: dict[str, Callable[[Json], Any]] = {
            "getMe": lambda _p: self.me,
            "deleteWebhook": self._delete_webhook,
            "setWebhook": self._set_webhook,
            "setMyCommands": self._set_commands,
            "sendChatAction": self._chat_action,
        }

    # -- scripting ---------------------------------------------------------
    @property
    def me(self) -> Json:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Watchkeeper",
            "username": self.username,
        }

    def fail(
        self,
        method: str,
        status: int,
        description: str,
        times: int = 1,
        retry_after: int | None = None,
        after: int = 0,
    ) -> None:
        """After ``after`` normal answers, the next ``times`` calls of ``method`` fail so."""
        queue = self.failures.setdefault(method, deque())
        queue.extend(None for _ in range(after))
        queue.extend(Failure(status, description, retry_after) for _ in range(times))

    def push_update(self, update: Json) -> Json:
        """Make ``update`` available to ``getUpdates`` (an ``update_id`` is added if missing)."""
        update.setdefault("update_id", next(self._update_ids))
        self.pending.append(update)
        self.pushed_at.setdefault(update["update_id"], time.perf_counter())
        self._wake.set()
        self._wake = asyncio.Event()
        return update

    def message(self, user_id: int, chat_id: int | None = None, **content: Any) -> Json:
        chat = chat_id if chat_id is not None else user_id
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat, "type": "private" if chat == user_id else "group"},
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            **content,
        }

    def push_text(
        self, user_id: int, text: str, chat_id: int | None = None, reply_to: int | None = None
    ) -> Json:
        content: Json = {"text": text}
        if reply_to is not None:
            content["reply_to_message"] = self.message(BOT_ID, chat_id or user_id, text="earlier")
            content["reply_to_message"]["message_id"] = reply_to
        return self.push_update({"message": self.message(user_id, chat_id, **content)})

    def push_content(self, user_id: int, **content: Any) -> Json:
        """A message with any content: ``photo=[...]``, ``voice={...}``, ``caption=...``."""
        return self.push_update({"message": self.message(user_id, **content)})

    def push_photo(self, user_id: int, caption: str | None = None) -> Json:
        size = {"file_id": "ph1", "file_unique_id": "u1", "width": 90, "height": 90}
        extra = {"caption": caption} if caption else {}
        return self.push_content(user_id, photo=[size], **extra)

    def push_callback(
        self, user_id: int, data: str, message_id: int, query_id: str | None = None
    ) -> Json:
        """``user_id`` presses the button with ``data`` on message ``message_id``: the
        message as it reads now when the bot sent it (its chat, text and keyboard), else
        a stand-in. Each press has its own query id unless ``query_id`` is given (the
        first press of a message gets ``cb<message_id>``)."""
        sent = self.sent_message(message_id)
        chat = int(sent.chat_id) if sent is not None else user_id
        carrier = self.message(BOT_ID, chat, text=sent.visible if sent else "question")
        carrier["from"] = self.me
        carrier["message_id"] = message_id
        if sent is not None and sent.reply_markup:
            carrier["reply_markup"] = sent.reply_markup
        if query_id is None:
            taken = {a.query_id for a in self.answers} | {
                str(u["callback_query"]["id"]) for u in self.pending if "callback_query" in u
            }
            query_id = f"cb{message_id}"
            if query_id in taken:
                query_id = f"cb{message_id}-{next(self._query_ids)}"
        query = {
            "id": query_id,
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            "chat_instance": "ci",
            "message": carrier,
            "data": data,
        }
        return self.push_update({"callback_query": query})

    def sent_message(self, message_id: int) -> Sent | None:
        """The message the bot sent under ``message_id``, as it reads now (after edits)."""
        return next((m for m in self.sent if m.message_id == message_id), None)

    def requeue(self, update: Json) -> None:
        """Offer ``update`` again, as Telegram does when a confirmation never arrived."""
        self.pending.append(update)
        self._wake.set()
        self._wake = asyncio.Event()

    # -- inspection --------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        return str(self._server.make_url("")).rstrip("/")

    def calls_to(self, method: str) -> list[Json]:
        return [params for name, params in self.calls if name == method]

    async def wait_for(self, predicate: Callable[[], bool], within: float = WATCHDOG) -> None:
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("fake Telegram: condition not met in time")
            await asyncio.sleep(0.005)

    async def wait_sent(self, count: int, within: float = WATCHDOG) -> list[Sent]:
        await self.wait_for(lambda: len(self.sent) >= count, within)
        return self.sent

    async def wait_confirmed(self, update_id: int, within: float = WATCHDOG) -> None:
        await self.wait_for(lambda: update_id in self.confirmed, within)

    # -- lifecycle ---------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        self.files.routes(app)
        app.router.add_post("/bot{token}/{method}", self._handle)
        self._server = TestServer(app, host="127.0.0.1", port=0)
        await self._server.start_server(shutdown_timeout=0.5)

    async def stop(self) -> None:
        self._closing.set()
        self._wake.set()
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- the API -----------------------------------------------------------
    async def _params(self, request: web.Request) -> Json:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        form = await request.post()
        return {k: _decode(k, v) for k, v in form.items() if isinstance(v, str)}

    async def _handle(self, request: web.Request) -> web.Response:
        arrived = time.perf_counter()
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await self._params(request)
        self.calls.append((method, params))
        delivering = method == "sendMessage" and self.hang_after_delivery
        if method in self.hanging or delivering:
            if delivering:
                self._send_message(params, arrived)
            await self._closing.wait()
            return _error(500, "Internal Server Error")
        queue = self.failures.get(method)
        failure = queue.popleft() if queue else None
        if failure is not None:
            return _error(failure.status, failure.description, failure.retry_after)
        if method == "getUpdates":
            updates = await self._get_updates(params)
            answer = web.json_response({"ok": True, "result": updates})
            await answer.prepare(request)
            await answer.write_eof()
            self.handed_out.extend(u["update_id"] for u in updates)
            return answer
        if method == "sendMessage":
            return self._send_message(params, arrived)
        if method == "answerCallbackQuery":
            return self._answer_callback(params)
        if method in ("editMessageText", "editMessageReplyMarkup"):
            return self._edit(method, params)
        handler = self._methods.get(method)
        if handler is None:
            return _error(404, "Not Found")
        return web.json_response({"ok": True, "result": handler(params)})

    async def _get_updates(self, params: Json) -> list[Json]:
        offset = params.get("offset")
        if isinstance(offset, int):
            gone = [u for u in self.pending if u["update_id"] < offset]
            self.confirmed.extend(u["update_id"] for u in gone)
            self.pending = [u for u in self.pending if u["update_id"] >= offset]
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while not self.pending and not self._closing.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), remaining)
        return self.pending[:limit]

    def _flooded(self, chat_id: str, now: float) -> tuple[str, float] | None:
        """The limit a message to ``chat_id`` arriving ``now`` would break, and how long
        until it would not; None when it may go. Arrivals are kept sorted: requests are
        read concurrently, so they are not always accepted in the order they arrived."""
        rules = self.flood
        if rules is None:
            return None
        chat = self._chat_sends.get(chat_id, [])
        at = bisect.bisect_right(chat, now)
        near = [t for t in chat[max(0, at - 1) : at + 1] if abs(now - t) < rules.chat_gap]
        if near:
            return "chat", max(near) + rules.chat_gap - now
        if chat_id.startswith("-"):
            recent = chat[bisect.bisect_right(chat, now - rules.group_period) : at]
            if len(recent) >= rules.per_group:
                return "group", recent[-rules.per_group] + rules.group_period - now
        bot = self._bot_sends
        recent = bot[
            bisect.bisect_right(bot, now - rules.bot_period) : bisect.bisect_right(bot, now)
        ]
        if len(recent) >= rules.per_bot:
            return "bot", recent[-rules.per_bot] + rules.bot_period - now
        return None

    def _count(self, chat_id: str, now: float) -> None:
        if self.flood is not None:
            bisect.insort(self._bot_sends, now)
            bisect.insort(self._chat_sends.setdefault(chat_id, []), now)

    def _send_message(self, params: Json, arrived: float) -> web.Response:
        chat_key = str(params.get("chat_id"))
        flooded = self._flooded(chat_key, arrived)
        if flooded is not None:
            limit, wait = flooded
            retry_after = max(1, math.ceil(wait))
            self.refusals.append(Refusal(chat_key, arrived, limit, retry_after))
            return _error(429, f"Too Many Requests: retry after {retry_after}", retry_after)
        text = str(params.get("text", ""))
        parse_mode = params.get("parse_mode")
        visible = text
        if parse_mode == "HTML":
            if self.reject_html:
                return _error(400, "Bad Request: can't parse entities: rejected by the fake")
            visible, problem = _check_html(text)
            if problem:
                return _error(400, f"Bad Request: can't parse entities: {problem}")
            visible = html.unescape(visible)
        if not visible.strip():
            return _error(400, "Bad Request: message text is empty")
        if _utf16(visible) > 4096:
            return _error(400, "Bad Request: message is too long")
        reply = params.get("reply_parameters")
        sent = Sent(
            chat_id=str(params.get("chat_id")),
            text=text,
            parse_mode=parse_mode,
            reply_markup=params.get("reply_markup"),
            reply_to=reply.get("message_id") if isinstance(reply, dict) else None,
            message_id=next(self._message_ids),
            at=arrived,
        )
        self.sent.append(sent)
        self._count(sent.chat_id, arrived)
        chat_id = params.get("chat_id")
        result = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id if isinstance(chat_id, int) else 0, "type": "private"},
            "from": self.me,
            "text": visible,
        }
        if self.answer_without_ids:
            del result["message_id"]
        return web.json_response({"ok": True, "result": result})

    def _delete_webhook(self, _params: Json) -> bool:
        self.webhook = None
        return True

    def _set_webhook(self, params: Json) -> bool:
        self.webhook = params
        return True

    def _set_commands(self, params: Json) -> bool:
        self.commands = list(params.get("commands") or [])
        return True

    def _chat_action(self, params: Json) -> bool:
        self.chat_actions.append((str(params.get("chat_id")), str(params.get("action"))))
        return True

    def _answer_callback(self, params: Json) -> web.Response:
        query_id = str(params.get("callback_query_id"))
        if query_id in self.answered_callbacks:
            return _error(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        text = params.get("text")
        if isinstance(text, str) and len(text) > 200:
            return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        self.answered_callbacks.append(query_id)
        show_alert = params.get("show_alert") in (True, "true", "True")
        self.answers.append(Answer(query_id, text if isinstance(text, str) else None, show_alert))
        return web.json_response({"ok": True, "result": True})

    def _edit(self, method: str, params: Json) -> web.Response:
        """``editMessageText`` / ``editMessageReplyMarkup`` of a message the bot sent."""
        message_id = params.get("message_id")
        sent = self.sent_message(message_id) if isinstance(message_id, int) else None
        if sent is None or sent.chat_id != str(params.get("chat_id")):
            return _error(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup")
        keyboard = markup if isinstance(markup, dict) and markup.get("inline_keyboard") else None
        text, parse_mode = sent.text, sent.parse_mode
        if method == "editMessageText":
            text = str(params.get("text", ""))
            parse_mode = params.get("parse_mode")
            visible = text
            if parse_mode == "HTML":
                visible, problem = _check_html(text)
                if problem:
                    return _error(400, f"Bad Request: can't parse entities: {problem}")
                visible = html.unescape(visible)
            if not visible.strip():
                return _error(400, "Bad Request: message text is empty")
            if _utf16(visible) > 4096:
                return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        same_text = _visible_text(text) if parse_mode == "HTML" else text
        if same_text == sent.visible and keyboard == (sent.reply_markup or None):
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the "
                "message",
            )
        sent.text, sent.parse_mode, sent.reply_markup = text, parse_mode, keyboard
        changed = text if method == "editMessageText" else None
        self.edits.append(Edit(method, sent.message_id, changed, keyboard))
        result: Json = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "chat": {"id": int(sent.chat_id), "type": "private"},
            "from": self.me,
            "text": sent.visible,
        }
        if keyboard is not None:
            result["reply_markup"] = keyboard
        return web.json_response({"ok": True, "result": result})
