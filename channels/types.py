"""Messages shared by every channel, and the interfaces a channel implements (``Channel``;
``MediaSource`` for one that downloads the media it announced).

Channels only turn transport events into ``InboundMessage`` and send
``OutboundMessage``; they never decide what the agent does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

MediaKind = Literal["image", "audio"]


@dataclass(frozen=True)
class MediaItem:
    """A photo or a voice note announced by the transport, not yet downloaded.

    ``source`` says how the channel fetches it (Telegram ``{"file_id"}``, Twilio
    ``{"url"}``, WhatsApp the serialised neonize message); ``size`` and
    ``duration_s`` are what the transport announced, checked against the caps before
    any download."""

    kind: MediaKind
    mime: str
    source: dict[str, str]
    size: int | None = None
    duration_s: int | None = None
    name: str = ""


class MediaTooLarge(Exception):
    """The download went past the byte cap (the announced size was missing or wrong)."""


class MediaRefused(Exception):
    """The channel will not fetch this (an address outside the provider's host)."""


@runtime_checkable
class MediaSource(Protocol):
    """A channel that can download the media it announced."""

    async def fetch_media(self, source: Mapping[str, str], max_bytes: int) -> bytes:
        """The file's bytes; ``MediaTooLarge`` past ``max_bytes``, ``MediaRefused`` when
        it will not try."""
        ...


VoiceAnswer = Callable[[Mapping[str, str], Mapping[str, str]], Awaitable[str]]
"""Given a signed voice webhook's query and form, the TwiML to answer it with."""
WebHandler = Callable[[Any], Awaitable[Any]]
"""An aiohttp request handler (``web.Request`` -> ``web.Response``)."""


@runtime_checkable
class PlacesCalls(Protocol):
    """A channel that rings the owner (Twilio): the webhook its calls report to."""

    def voice_webhook(self, answer: VoiceAnswer) -> WebHandler:
        """The handler of the calls' webhooks, answered with the TwiML ``answer`` gives."""
        ...


@dataclass(frozen=True)
class InboundMessage:
    """A message as its transport delivered it: transport fields only. What the pipeline
    learns once it is stored travels beside it (``channels.delivery.inbox.Envelope``)."""

    channel: str
    external_id: str
    """Unique per channel (Telegram update id, Twilio MessageSid...): the dedupe key."""
    chat_id: str
    sender_id: str
    text: str
    received_at: datetime
    sender_name: str = ""
    reply_to: str | None = None
    """External id of the message this one replies to, when the transport says."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the transport reports (``is_group``...); never trusted for access."""
    media: tuple[MediaItem, ...] = ()
    """Photos and voice notes attached; ``text`` still carries their marker and caption."""

    @property
    def conversation_key(self) -> str:
        return f"{self.channel}:{self.chat_id}"


@dataclass(frozen=True)
class Button:
    label: str
    data: str


PRESS_DATA_MAX = 64
"""Bytes of a button's data Telegram keeps (``callback_data``)."""
_PRESS = re.compile(r"([a-z]):([a-z]{1,8}):([0-9]{1,12})")


@dataclass(frozen=True)
class Press:
    """What a button names: a subject kind (``a`` an alert, ``h`` held calls), an
    action and the subject's code, written ``a:ack:12``: short, well inside the 64 bytes
    a button may carry, and checked on the way in (``parse``)."""

    kind: str
    action: str
    code: str

    @property
    def data(self) -> str:
        data = f"{self.kind}:{self.action}:{self.code}"
        if _PRESS.fullmatch(data) is None:
            raise ValueError(f"not button data: {data!r}")
        return data

    @classmethod
    def parse(cls, data: str) -> Press | None:
        """The press ``data`` names; None when it is not in this form."""
        found = _PRESS.fullmatch(data) if len(data.encode()) <= PRESS_DATA_MAX else None
        return cls(*found.groups()) if found is not None else None


PRESSED = "button"
"""``InboundMessage.meta["kind"]`` of a button press; its ``text`` is the button's data."""


VERBATIM = "verbatim"
"""``OutboundMessage.meta`` key: send the text exactly as written, with no formatting (a
Markdown link would hide its address, ``**`` and ``_`` would vanish): what the owner
approves must show every character."""
SMS_BUDGET_TAKEN = "sms_budget_taken"
"""``OutboundMessage.meta`` key: the sender already reserved this SMS in the hourly budget
(or keeps it outside the budget on purpose: a test page's one SMS)."""
SMS_STATUS_CALLBACK = "sms_status_callback"
"""``OutboundMessage.meta`` key: the URL Twilio posts this SMS's delivery status to."""
PRESS_ANSWER = "press_answer"
"""``OutboundMessage.meta`` key: this answers a button press instead of being a new
message. The value: ``{"query_id": the press's id, "notice": a short text shown on the
pressing phone, "edit": the id of the message to edit, or None, "shown": that message
as it reads (Telegram HTML)}``. With ``edit``, the message is rewritten to ``shown``
followed by ``text`` and loses its buttons."""
VOICE_CALL = "voice_call"
"""``OutboundMessage.meta`` key: ring ``chat_id`` instead of texting it; ``text`` is the
call's TwiML and the value a ``{"status_callback": url, "ring_until": ISO time}`` dict (a
call retried past ``ring_until`` is dropped: a late ring wakes for nothing)."""


@dataclass(frozen=True)
class OutboundMessage:
    channel: str
    chat_id: str
    text: str
    idempotency_key: str
    reply_to: str | None = None
    buttons: tuple[Button, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SendResult:
    external_ids: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)


class SendError(Exception):
    """Sending failed; ``retryable`` says whether trying again may help, and
    ``retry_after`` how long the service asked us to wait (seconds), when it said."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class HandlingFailed(Exception):
    """A handler could not process a message. The pipeline stores it as ``failed`` with
    ``reason`` (for the operator; never shown to the sender) and still sends
    ``replies`` (an apology, when the sender may be answered)."""

    def __init__(self, reason: str, replies: Sequence[Reply] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.replies = tuple(replies)


InboundSink = Callable[[InboundMessage], Awaitable[bool]]
"""Stores an inbound message durably; returns False for a duplicate."""


class Channel(Protocol):
    name: str

    async def start(self, sink: InboundSink) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> SendResult: ...

    async def typing(self, chat_id: str) -> None: ...

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Reply:
    """What a handler wants sent back; channel and chat default to the inbound's."""

    text: str
    buttons: tuple[Button, ...] = ()
    channel: str | None = None
    chat_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    replayable: bool = False
    """The handler would give this same reply again, with no side effect, if the message
    were handled anew after a crash (the agent's answer: stored in the conversation
    before it is returned). The outbox may then send it before storing it."""
