"""The WhatsApp channel on neonize's async client (whatsmeow underneath).

Transport only: events become ``InboundMessage`` for the pipeline, outbound
messages go to ``send_message``. Who may talk to the agent is decided by the
agent's resolver; this channel only drops what must never be stored (our own
echoes, groups nobody permitted) and counts it.

neonize is imported lazily by the default client factory: importing it loads a
19 MB library, so nothing happens unless WhatsApp is enabled. The client is made
by an injectable factory, so tests drive a fake that records sends and emits
real neonize protobuf events.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

from channels.registry import ChannelName
from channels.types import (
    InboundMessage,
    InboundSink,
    MediaTooLarge,
    OutboundMessage,
    SendError,
    SendResult,
)
from channels.whatsapp.events import (
    WaMessage,
    jid_string,
    parse_message,
    phone_of,
    phone_to_jid,
)
from runtime.backoff import Backoff, Pauses
from runtime.clock import Clock, utcnow
from storage.repos.whatsapp_permissions import normalise_phone

log = logging.getLogger(__name__)

ClientFactory = Callable[[str], Any]
"""Session database path -> a client with neonize's ``NewAClient`` interface."""
GroupCheck = Callable[[str], Awaitable[bool]]
Notify = Callable[[str, str], Awaitable[None]]
"""(kind, text): kind is ``disconnected``, ``logged_out`` or ``unlinked``."""
Sleep = Callable[[float], Awaitable[None]]

RECONNECT_BACKOFF = Backoff(first=1.0, cap=300.0)
"""Waits between connection attempts: 1 s doubling to 5 minutes, never giving up."""
NOTICE_AFTER = timedelta(minutes=5)
SEEN_LIMIT = 2_000
ECHO_SECONDS = 120.0
LOGGED_OUT = frozenset({"logged_out", "unlinked"})


def neonize_client(session_path: str) -> Any:
    """The real client; imports neonize only now."""
    from neonize.aioze.client import NewAClient

    return NewAClient(session_path)


def _neonize_events() -> dict[str, Any]:
    from neonize.aioze import events as ev

    return {
        "message": ev.MessageEv,
        "connected": ev.ConnectedEv,
        "disconnected": ev.DisconnectedEv,
        "logged_out": ev.LoggedOutEv,
    }


def to_jid(chat_id: str) -> str | None:
    """A chat id as stored (JID string) or an E.164 number -> JID string."""
    if "@" in chat_id:
        return chat_id.strip()
    phone = normalise_phone(chat_id)
    return phone_to_jid(phone) if phone else None


class WhatsAppChannel:
    name: str = ChannelName.WHATSAPP

    def __init__(
        self,
        session_path: Path,
        *,
        client_factory: ClientFactory = neonize_client,
        group_allowed: GroupCheck | None = None,
        notify: Notify | None = None,
        clock: Clock = utcnow,
        sleep: Sleep = asyncio.sleep,
        backoff: Backoff = RECONNECT_BACKOFF,
        notice_after: timedelta = NOTICE_AFTER,
        health_every: float = 30.0,
    ) -> None:
        self._session_path = session_path
        self._factory = client_factory
        self._group_allowed = group_allowed
        self._notify = notify
        self._clock = clock
        self._sleep = sleep
        self._notice_after = notice_after
        self._health_every = health_every
        self._client: Any = None
        self._sink: InboundSink | None = None
        self._state = "stopped"
        self._since = clock()
        self._pauses = Pauses(backoff, sleep=sleep)
        self._notified = False
        self._stopping = False
        self._own_chats: set[str] = set()
        self._own_phone = ""
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._sent_texts: dict[tuple[str, str], float] = {}
        self.ignored: Counter[str] = Counter()
        self.delays: list[float] = []
        """Backoff delays slept so far (status and tests)."""
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._stopping = False
        self._session_path.parent.mkdir(parents=True, exist_ok=True)
        self._client = self._factory(str(self._session_path))
        self._register(self._client)
        self._set_state("connecting")
        self._tasks = [
            asyncio.create_task(self._supervise(), name="whatsapp:supervise"),
            asyncio.create_task(self._watch(), name="whatsapp:health"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.disconnect(), timeout=5)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._set_state("stopped")

    def _register(self, client: Any) -> None:
        events = _neonize_events()
        client.event(events["message"])(self._on_message)
        client.event(events["connected"])(self._on_connected)
        client.event(events["disconnected"])(self._on_disconnected)
        client.event(events["logged_out"])(self._on_logged_out)
        client.event.qr(self._on_qr)

    async def _supervise(self) -> None:
        """Connect, and whenever the session ends or fails, connect again with backoff.

        It never gives up: a phone that is offline for a day must still come back.
        """
        while not self._stopping:
            if self._state not in LOGGED_OUT:
                self._set_state("connecting")
            try:
                session = await self._client.connect()
                if isinstance(session, Awaitable):
                    await session  # neonize: runs for as long as the session lives
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("whatsapp connection failed: %s", exc)
            if self._stopping:
                return
            if self._state not in LOGGED_OUT:
                self._set_state("disconnected")
            log.info(
                "whatsapp: reconnecting in %.0f s (attempt %d)",
                self._pauses.upcoming,
                self._pauses.failures + 1,
            )
            self.delays.append(await self._pauses.sleep())

    async def _watch(self) -> None:
        while not self._stopping:
            await self._sleep(self._health_every)
            await self.check_health()

    async def check_health(self) -> None:
        """Tell the owner once when logged out, or disconnected for too long."""
        if self._notified or self._stopping:
            return
        if self._state in LOGGED_OUT:
            await self._notice(self._state)
        elif self._state != "connected" and self._clock() - self._since >= self._notice_after:
            await self._notice("disconnected")

    async def _notice(self, kind: str) -> None:
        self._notified = True
        since = self._since.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        texts = {
            "disconnected": f"WhatsApp has been disconnected since {since}. "
            "Reconnecting continues in the background.",
            "logged_out": f"WhatsApp was logged out at {since}. Run `watchkeeper whatsapp link` "
            "to link the account again.",
            "unlinked": "WhatsApp is not linked. Run `watchkeeper whatsapp link` to link it.",
        }
        log.warning("whatsapp: %s", texts[kind])
        if self._notify is None:
            return
        try:
            await self._notify(kind, texts[kind])
        except Exception:
            log.exception("could not deliver the WhatsApp %s notice", kind)

    def _set_state(self, state: str) -> None:
        if state == self._state:
            return
        log.info("whatsapp: %s", state)
        self._state, self._since = state, self._clock()
        if state == "connected":
            self._pauses.reset()
            if self._notified:
                log.info("whatsapp: back online")
            self._notified = False

    # -- events ---------------------------------------------------------------------

    async def _on_connected(self, client: Any, _ev: Any) -> None:
        self._set_state("connected")
        try:
            me = await client.get_me()
        except Exception:
            log.warning("whatsapp: could not read the linked account", exc_info=True)
            return
        self._own_chats = {j for j in (jid_string(me.JID), jid_string(me.LID)) if j}
        self._own_phone = phone_of(me.JID)

    async def _on_disconnected(self, _client: Any, _ev: Any) -> None:
        if self._state not in LOGGED_OUT:
            self._set_state("disconnected")

    async def _on_logged_out(self, _client: Any, _ev: Any) -> None:
        self._set_state("logged_out")
        await self.check_health()

    async def _on_qr(self, _client: Any, _data: bytes) -> None:
        # A QR while running means the session is not linked: say so, never print it.
        self._set_state("unlinked")
        await self.check_health()

    async def _on_message(self, _client: Any, ev: Any) -> None:
        try:
            parsed = parse_message(ev, self._clock)
        except Exception:
            log.exception("could not read a WhatsApp message event")
            self.ignored["unreadable"] += 1
            return
        if parsed is None or not self._first_time(parsed.id):
            return
        message = await self._inbound(parsed)
        if message is None:
            return
        await self._submit(message)

    async def _inbound(self, m: WaMessage) -> InboundMessage | None:
        """The message as the pipeline stores it, or None for what is never stored."""
        self_chat = False
        if m.from_me:
            if m.chat not in self._own_chats or self._is_echo(m):
                self.ignored["own_echo"] += 1
                return None
            self_chat = True
        if m.is_group:
            allowed = self._group_allowed is not None and await self._group_allowed(m.chat)
            if not allowed:
                self.ignored["group"] += 1
                log.debug("whatsapp: message in unpermitted group %s ignored", m.chat)
                return None
        sender = m.sender_phone or (self._own_phone if self_chat else "") or m.sender_jid
        return InboundMessage(
            channel=self.name,
            external_id=m.id,
            chat_id=m.chat,
            sender_id=sender,
            text=m.text,
            received_at=m.timestamp,
            sender_name=m.push_name,
            reply_to=m.reply_to,
            meta={"self_chat": self_chat, "is_group": m.is_group, "sender_jid": m.sender_jid},
            media=m.media,
        )

    def _first_time(self, message_id: str) -> bool:
        if message_id in self._seen:
            return False
        self._seen[message_id] = None
        if len(self._seen) > SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    def _is_echo(self, m: WaMessage) -> bool:
        if m.id in self._sent:
            return True
        sent_at = self._sent_texts.get((m.chat, m.text.strip()))
        return sent_at is not None and time.monotonic() - sent_at < ECHO_SECONDS

    async def _submit(self, message: InboundMessage) -> None:
        if self._sink is None:
            return
        await self._sink(message)

    async def fetch_media(self, source: Mapping[str, str], max_bytes: int) -> bytes:
        """A photo or voice note (``channels.types.MediaSource``). neonize downloads and
        decrypts it whole, so only the announced size (checked before) and the result
        are held against the cap."""
        if self._client is None:
            raise RuntimeError("whatsapp is not connected")
        from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import Message

        message = Message.FromString(base64.b64decode(source.get("message", "")))
        data = await self._client.download_any(message)
        if not data:
            raise RuntimeError("whatsapp gave no content")
        if len(data) > max_bytes:
            raise MediaTooLarge(f"{len(data)} bytes")
        return bytes(data)

    # -- outbound -------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> SendResult:
        jid = to_jid(message.chat_id)
        if jid is None:
            raise SendError(f"not a WhatsApp chat id: {message.chat_id!r}", retryable=False)
        if self._client is None or self._state != "connected":
            raise SendError(f"WhatsApp is {self._state}", retryable=True)
        try:
            response = await self._client.send_message(jid, message.text)
        except Exception as exc:
            raise SendError(f"WhatsApp send failed: {exc}", retryable=True) from exc
        sent_id = str(getattr(response, "ID", "") or "")
        self._remember_sent(jid, sent_id, message.text)
        return SendResult(external_ids=(sent_id,) if sent_id else ())

    def _remember_sent(self, jid: str, sent_id: str, text: str) -> None:
        if sent_id:
            self._sent[sent_id] = None
            if len(self._sent) > SEEN_LIMIT:
                self._sent.popitem(last=False)
        now = time.monotonic()
        self._sent_texts = {k: t for k, t in self._sent_texts.items() if now - t < ECHO_SECONDS}
        self._sent_texts[(jid, text.strip())] = now

    async def typing(self, chat_id: str) -> None:
        jid = to_jid(chat_id)
        if jid is None or self._client is None or self._state != "connected":
            return
        try:
            from neonize.utils.enum import ChatPresence, ChatPresenceMedia
            from neonize.utils.jid import build_jid

            user, server = jid.split("@", 1)
            await self._client.send_chat_presence(
                build_jid(user, server),
                ChatPresence.CHAT_PRESENCE_COMPOSING,
                ChatPresenceMedia.CHAT_PRESENCE_MEDIA_TEXT,
            )
        except Exception:
            log.debug("whatsapp typing indicator failed", exc_info=True)

    def status(self) -> dict[str, Any]:
        return {
            "state": self._state,
            "connected": self._state == "connected",
            "since": self._since.isoformat(),
            "account": self._own_phone or None,
            "reconnect_attempts": self._pauses.failures,
            "notified": self._notified,
            "ignored": dict(self.ignored),
        }
