"""A fake neonize ``NewAClient`` and builders of real neonize protobuf events.

The fake has the same surface the channel uses (``event(cls)(handler)``,
``event.qr``, ``connect``, ``send_message``, ``get_me``, ``disconnect``,
``download_any``), records what is sent and downloaded, and emits events built from
neonize's own protobuf classes. Media is hosted by its ``fileSHA256``, the way
whatsmeow finds and verifies a file; an unknown one raises neonize's ``DownloadError``. It never
touches the network: neonize's ``connect`` is never called.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from neonize.exc import DownloadError
from neonize.proto.Neonize_pb2 import (
    JID,
    Device,
    MessageInfo,
    MessageSource,
    SendResponse,
)
from neonize.proto.Neonize_pb2 import Message as MessageEv
from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import AudioMessage, ImageMessage, Message

USER = "s.whatsapp.net"
Handler = Callable[[Any, Any], Awaitable[None]]


def jid(user: str, server: str = USER) -> JID:
    return JID(User=user.lstrip("+"), Server=server)


_ids = itertools.count(1)


def message_event(
    chat: JID,
    sender: JID,
    text: str | None = None,
    *,
    message: Message | None = None,
    id: str | None = None,
    from_me: bool = False,
    is_group: bool = False,
    push_name: str = "",
    timestamp: int = 1_767_225_600,
) -> MessageEv:
    """A neonize ``MessageEv`` as the Go side delivers it."""
    source = MessageSource(Chat=chat, Sender=sender, IsFromMe=from_me, IsGroup=is_group)
    info = MessageInfo(
        MessageSource=source,
        ID=id or f"3EB0{next(_ids):012d}",
        Timestamp=timestamp,
        Pushname=push_name,
        Type="text",
    )
    return MessageEv(Info=info, Message=message or Message(conversation=text or ""))


def image_message(data: bytes, caption: str = "", *, announced: int | None = None) -> Message:
    """An ``imageMessage`` as WhatsApp sends it (``announced``: a ``fileLength`` to claim)."""
    image = ImageMessage(
        URL="https://mmg.whatsapp.net/o1/v/t62/abc", directPath="/o1/v/t62/abc",
        mimetype="image/jpeg", caption=caption, fileSHA256=hashlib.sha256(data).digest(),
        fileLength=len(data) if announced is None else announced, height=640, width=480,
        mediaKey=b"k" * 32, JPEGThumbnail=b"\xff\xd8thumb",
    )  # fmt: skip
    return Message(imageMessage=image)


def voice_message(data: bytes, seconds: int) -> Message:
    """A voice note (``audioMessage`` with ``PTT``), Opus in Ogg."""
    audio = AudioMessage(
        URL="https://mmg.whatsapp.net/v/t62.7117-24/x", directPath="/v/t62.7117-24/x",
        mimetype="audio/ogg; codecs=opus", fileSHA256=hashlib.sha256(data).digest(),
        fileLength=len(data), seconds=seconds, PTT=True, mediaKey=b"k" * 32,
    )  # fmt: skip
    return Message(audioMessage=audio)


class _Events:
    def __init__(self) -> None:
        self.handlers: dict[type, Handler] = {}
        self.qr_handler: Handler | None = None

    def __call__(self, cls: type) -> Callable[[Handler], None]:
        def register(func: Handler) -> None:
            self.handlers[cls] = func

        return register

    def qr(self, func: Handler) -> None:
        self.qr_handler = func


class FakeClient:
    def __init__(self, path: str, *, me: str = "4915100000001", fail_connects: int = 0) -> None:
        self.path = path
        self.event = _Events()
        self.me = Device(JID=jid(me), LID=JID(User="123456789", Server="lid"))
        self.fail_connects = fail_connects
        self.connect_calls = 0
        self.sent: list[tuple[str, str]] = []
        self.send_error: Exception | None = None
        self.paired: list[str] = []
        self.session: asyncio.Future[None] | None = None
        self._out = itertools.count(1)
        self.media: dict[bytes, bytes] = {}
        self.downloads: list[Message] = []

    def host(self, data: bytes) -> bytes:
        """Make ``data`` downloadable; returns its ``fileSHA256``."""
        sha = hashlib.sha256(data).digest()
        self.media[sha] = data
        return sha

    async def download_any(self, message: Message, path: str | None = None) -> bytes | None:
        self.downloads.append(message)
        for field in ("imageMessage", "audioMessage", "videoMessage", "documentMessage"):
            if message.HasField(field):
                data = self.media.get(getattr(message, field).fileSHA256)
                if data is not None:
                    return data
        raise DownloadError("failed to download media: 404 Not Found")

    async def connect(self) -> asyncio.Future[None]:
        self.connect_calls += 1
        if self.connect_calls <= self.fail_connects:
            raise ConnectionError("dial tcp: lookup web.whatsapp.com: offline")
        self.session = asyncio.get_running_loop().create_future()
        return self.session

    async def emit(self, ev: Any) -> None:
        await self.event.handlers[type(ev)](self, ev)

    async def emit_qr(self, data: bytes) -> None:
        assert self.event.qr_handler is not None
        await self.event.qr_handler(self, data)

    def end_session(self) -> None:
        if self.session is not None and not self.session.done():
            self.session.set_result(None)

    async def send_message(self, to: str, text: str) -> SendResponse:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append((to, text))
        return SendResponse(ID=f"OUT{next(self._out)}")

    async def send_chat_presence(self, *_args: Any) -> None:
        return None

    async def get_me(self) -> Device:
        return self.me

    async def PairPhone(self, phone: str, show_push_notification: bool) -> str:
        self.paired.append(phone)
        return "ABCD-EFGH"

    async def disconnect(self) -> None:
        self.end_session()
