"""Turning a Telegram update into an ``InboundMessage``, and fetching the files it announced.

Media the agent cannot look at still reaches it as a short marker plus the
caption (``[Photo] caption``, ``[Voice note 0:12]``), so nothing the person
sent is dropped without a word. Updates that carry nothing a person wrote
(service messages, edits, reactions) give ``None``, logged.

A file a user sent is downloaded later, for a message the agent reads: ``getFile``,
then the Bot API file URL ``<TELEGRAM_API_BASE_URL>/file/bot<token>/<file_path>``; the
bot was built with that base (``Bot(base_file_url=...)``), so PTB's ``File.file_path``
is the full URL. The token is in it: failures are reported with it blanked out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from telegram import Bot, CallbackQuery, Message, Update, User
from telegram.error import BadRequest

from channels.http_fetch import fetch_capped
from channels.registry import ChannelName
from channels.types import PRESSED, InboundMessage, MediaItem, MediaKind, MediaTooLarge

log = logging.getLogger(__name__)

CHANNEL = ChannelName.TELEGRAM
DEFAULT_MAX_BYTES = 20_000_000
ALLOWED_UPDATES: tuple[str, ...] = ("message", "callback_query")
"""Asked for explicitly: edits and channel posts are not conversation turns here."""


def _clock(seconds: Any) -> str:
    total = int(seconds or 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _fields(obj: Any) -> dict[str, Any]:
    # to_dict() gives durations as plain seconds, without PTB's timedelta deprecation warning.
    fields: dict[str, Any] = obj.to_dict()
    return fields


def _join(*parts: Any) -> str:
    return " ".join(str(p) for p in parts if p not in (None, ""))


def _timed(label: str) -> Callable[[Any], str]:
    return lambda att: _join(label, _clock(_fields(att).get("duration")))


def _audio(att: Any) -> str:
    f = _fields(att)
    title = " - ".join(x for x in (f.get("performer"), f.get("title")) if x)
    return _join("Audio", title or f.get("file_name"), _clock(f.get("duration")))


def _contact(att: Any) -> str:
    return _join("Contact", att.first_name, att.last_name, att.phone_number)


# Checked in order: a venue also carries a location, so it comes first.
_MARKERS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("photo", lambda _att: "Photo"),
    ("voice", _timed("Voice note")),
    ("audio", _audio),
    ("video_note", _timed("Video note")),
    ("animation", lambda _att: "GIF"),
    ("video", _timed("Video")),
    ("document", lambda att: _join("Document", att.file_name)),
    ("sticker", lambda att: _join("Sticker", att.emoji)),
    ("venue", lambda att: f"Venue {att.title}, {att.address}"),
    ("location", lambda att: f"Location {att.latitude:g}, {att.longitude:g}"),
    ("contact", _contact),
    ("poll", lambda att: f"Poll: {att.question}"),
    ("dice", lambda att: _join("Dice", att.emoji, att.value)),
    ("game", lambda att: _join("Game", att.title)),
    ("story", lambda _att: "Story"),
    ("invoice", lambda att: _join("Invoice", att.title)),
)


def describe(message: Message) -> str | None:
    """What the person sent, as text; ``None`` for a service message."""
    if message.text is not None:
        body = message.text
    else:
        body = None
        for attr, marker in _MARKERS:
            attachment = getattr(message, attr, None)
            if attachment:
                body = _join(f"[{marker(attachment)}]", message.caption)
                break
        if body is None and message.caption:
            body = _join("[Attachment]", message.caption)
    if body is None:
        return None
    return f"[Forwarded] {body}" if message.forward_origin is not None else body


def _item(kind: MediaKind, att: Any, mime: str, name: str = "") -> MediaItem:
    f = _fields(att)
    duration = f.get("duration")
    return MediaItem(
        kind=kind,
        mime=f.get("mime_type") or mime,
        source={"file_id": str(f["file_id"])},
        size=f.get("file_size"),
        duration_s=int(duration) if isinstance(duration, (int, float)) else None,
        name=name,
    )


def media_of(message: Message, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[MediaItem, ...]:
    """The photo (its largest size under ``max_bytes``), voice note, audio file or image
    document the message carries, to be fetched later (``channels.delivery.media``)."""
    if message.photo:
        sizes = sorted(message.photo, key=lambda p: (p.file_size or 0, p.width * p.height))
        fitting = [p for p in sizes if (p.file_size or 0) <= max_bytes]
        return (_item("image", (fitting or sizes[:1])[-1], "image/jpeg"),)
    if message.voice:
        return (_item("audio", message.voice, "audio/ogg"),)
    if message.audio:
        audio = message.audio
        return (_item("audio", audio, "audio/mpeg", audio.file_name or audio.title or ""),)
    document = message.document
    if document and (document.mime_type or "").startswith("image/"):
        return (_item("image", document, "image/jpeg", document.file_name or ""),)
    return ()


def _name(user: User | None) -> str:
    if user is None:
        return ""
    return user.full_name or (user.username or "")


def _from_callback(update_id: int, query: CallbackQuery, now: datetime) -> InboundMessage | None:
    """A button press: its data as the text, the message it sits on as ``reply_to``. The
    press is answered (``answerCallbackQuery``) once it is handled, with what was done:
    ``meta`` keeps its id and the message as it reads (to be edited to say so; a
    message too old for the bot to see has no ``text``)."""
    carrier = query.message
    if query.data is None or carrier is None:
        return None  # games and inline-mode buttons: nothing for the agent to read
    shown = carrier.text_html if isinstance(carrier, Message) and carrier.text else None
    return InboundMessage(
        channel=CHANNEL,
        external_id=str(update_id),
        chat_id=str(carrier.chat.id),
        sender_id=str(query.from_user.id),
        sender_name=_name(query.from_user),
        text=query.data,
        received_at=now,
        reply_to=str(carrier.message_id),
        meta={"callback_query_id": query.id, "kind": PRESSED, "shown": shown},
    )


def to_inbound(
    update: Update, now: datetime, max_bytes: int = DEFAULT_MAX_BYTES
) -> InboundMessage | None:
    """The message a person sent in ``update``; ``None`` when nobody wrote anything, or
    when it cannot be read (one odd update must not block every later one): both logged.
    ``max_bytes`` picks the photo size to fetch."""
    try:
        message = update.message
        if message is None:
            query = update.callback_query
            found = _from_callback(update.update_id, query, now) if query is not None else None
        elif (text := describe(message)) is None:
            found = None
        else:
            sender = message.from_user
            # No user for anonymous group admins and channel posts: the chat speaks.
            speaker = sender or message.sender_chat or message.chat
            reply = message.reply_to_message
            found = InboundMessage(
                channel=CHANNEL,
                external_id=str(update.update_id),
                chat_id=str(message.chat.id),
                sender_id=str(speaker.id),
                sender_name=_name(sender),
                text=text,
                received_at=now,
                reply_to=str(reply.message_id) if reply is not None else None,
                meta={
                    "message_id": message.message_id,
                    "chat_type": message.chat.type,
                    **({"username": sender.username} if sender and sender.username else {}),
                },
                media=media_of(message, max_bytes),
            )
    except Exception:
        log.exception("could not read telegram update %d", update.update_id)
        return None
    if found is None:
        log.info("ignored telegram update %d (%s)", update.update_id, update_kind(update))
    return found


def update_kind(update: Update) -> str:
    """The update's type (``edited_message``, ``my_chat_member``...), for logs."""
    kinds = [k for k in update.to_dict() if k != "update_id"]
    return kinds[0] if kinds else "empty"


async def fetch_file(
    bot: Bot,
    source: Mapping[str, str],
    max_bytes: int,
    slots: asyncio.Semaphore,
    safe: Callable[[BaseException], str],
) -> bytes:
    """The bytes of a file a user sent (``source``: its ``file_id``), at most ``max_bytes``."""
    file_id = source.get("file_id")
    if not file_id:
        raise ValueError("no file_id to fetch")
    try:
        async with slots:
            file = await bot.get_file(file_id)
    except BadRequest as exc:
        if "too big" in str(exc).lower():  # over the Bot API's own download limit
            raise MediaTooLarge(safe(exc)) from None
        raise RuntimeError(safe(exc)) from None
    if file.file_size is not None and file.file_size > max_bytes:
        raise MediaTooLarge(f"getFile says {file.file_size} bytes")
    if not file.file_path:
        raise RuntimeError("getFile gave no file_path")
    try:
        return await fetch_capped(file.file_path, max_bytes)
    except MediaTooLarge:
        raise
    except Exception as exc:
        raise RuntimeError(safe(exc)) from None
