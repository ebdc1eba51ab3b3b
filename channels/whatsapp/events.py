"""neonize message events -> plain facts the WhatsApp channel can act on.

Works on the protobuf objects by attribute access only, so this module never
imports neonize (importing it loads a 19 MB library). Media become text markers
with their caption; anything without a marker is logged with its field names,
so no message disappears without a trace.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from channels.delivery.text import clean_text
from channels.types import MediaItem
from runtime.clock import Clock, utcnow

log = logging.getLogger(__name__)

USER_SERVER = "s.whatsapp.net"
GROUP_SERVER = "g.us"
LID_SERVER = "lid"

# Containers whose inner ``message`` holds the real content.
_WRAPPERS = (
    "ephemeralMessage",
    "viewOnceMessage",
    "viewOnceMessageV2",
    "viewOnceMessageV2Extension",
    "documentWithCaptionMessage",
    "editedMessage",
)
# Fields that carry no user-visible content (key exchange, receipts, reactions...).
_SILENT = frozenset(
    {
        "senderKeyDistributionMessage",
        "fastRatchetKeySenderKeyDistributionMessage",
        "messageContextInfo",
        "protocolMessage",
        "reactionMessage",
        "encReactionMessage",
        "pollUpdateMessage",
        "keepInChatMessage",
        "pinInChatMessage",
        "deviceSentMessage",
    }
)


@dataclass(frozen=True)
class WaMessage:
    """One inbound WhatsApp message, reduced to what the channel needs."""

    id: str
    chat: str
    """Chat JID string (``<user>@<server>``)."""
    sender_jid: str
    sender_phone: str
    """E.164 of the sender, or "" when WhatsApp only gave an opaque id."""
    from_me: bool
    is_group: bool
    timestamp: datetime
    text: str
    push_name: str = ""
    reply_to: str | None = None
    media: tuple[MediaItem, ...] = ()


def _text(value: Any) -> str:
    """A protobuf string field as text. upb hands back ``bytes`` when the field is not
    valid UTF-8 (``str()`` of which would be ``"b'...'"``): decoded, with U+FFFD."""
    if isinstance(value, (str, bytes, bytearray)):
        return clean_text(value)
    return str(value)


def jid_string(jid: Any) -> str:
    """``User@Server`` without the device part; "" for an empty JID."""
    user = _text(getattr(jid, "User", "") or "")
    server = _text(getattr(jid, "Server", "") or "")
    return f"{user}@{server}" if user and server else ""


def phone_of(jid: Any) -> str:
    """E.164 for a phone-number JID; "" for LIDs, groups and empty JIDs."""
    user = _text(getattr(jid, "User", "") or "")
    if getattr(jid, "Server", "") == USER_SERVER and user.isdigit():
        return "+" + user
    return ""


def phone_to_jid(phone: str) -> str:
    return f"{phone.lstrip('+')}@{USER_SERVER}"


def _timestamp(raw: int, clock: Clock) -> datetime:
    if raw <= 0:
        return clock()
    seconds = raw / 1000 if raw > 10**12 else raw  # neonize gives seconds; be lenient
    return datetime.fromtimestamp(seconds, UTC)


def _has(msg: Any, name: str) -> bool:
    try:
        return bool(msg.HasField(name))
    except ValueError:  # not a message field
        return False


def _unwrap(msg: Any) -> Any:
    for _ in range(4):  # wrappers nest at most a few levels
        for name in _WRAPPERS:
            if _has(msg, name) and _has(getattr(msg, name), "message"):
                msg = getattr(msg, name).message
                break
        else:
            return msg
    return msg


def _marker(label: str, caption: Any) -> str:
    caption = _text(caption).strip()
    return f"[{label}] {caption}" if caption else f"[{label}]"


def _media_text(msg: Any) -> str | None:
    if _has(msg, "imageMessage"):
        return _marker("Image", msg.imageMessage.caption)
    if _has(msg, "videoMessage") or _has(msg, "ptvMessage"):
        video = msg.videoMessage if _has(msg, "videoMessage") else msg.ptvMessage
        return _marker("Video", video.caption)
    if _has(msg, "documentMessage"):
        doc = msg.documentMessage
        name = _text(doc.fileName or doc.title or "file")
        return _marker(f"Document {name}", doc.caption)
    if _has(msg, "audioMessage"):
        return "[Voice note]" if msg.audioMessage.PTT else "[Audio]"
    if _has(msg, "stickerMessage") or _has(msg, "lottieStickerMessage"):
        return "[Sticker]"
    if _has(msg, "locationMessage") or _has(msg, "liveLocationMessage"):
        loc = msg.locationMessage if _has(msg, "locationMessage") else msg.liveLocationMessage
        where = f"{loc.degreesLatitude:.5f},{loc.degreesLongitude:.5f}"
        label = " ".join(
            _text(x) for x in (getattr(loc, "name", ""), getattr(loc, "address", "")) if x
        )
        return _marker(f"Location {where}", label)
    if _has(msg, "contactMessage"):
        return _marker("Contact", msg.contactMessage.displayName)
    if _has(msg, "contactsArrayMessage"):
        return _marker("Contacts", msg.contactsArrayMessage.displayName)
    if _has(msg, "pollCreationMessage"):
        return _marker("Poll", msg.pollCreationMessage.name)
    return None


def message_text(msg: Any) -> str | None:
    """The text (or media marker) of a WhatsApp ``Message``; None when there is none."""
    msg = _unwrap(msg)
    if msg.conversation:
        return _text(msg.conversation)
    if _has(msg, "extendedTextMessage") and msg.extendedTextMessage.text:
        return _text(msg.extendedTextMessage.text)
    return _media_text(msg)


def media_items(msg: Any) -> tuple[MediaItem, ...]:
    """A photo or voice note (or other audio) to fetch later with neonize's
    ``download_any``: ``source["message"]`` is the serialised inner ``Message``
    (base64), without its preview thumbnail."""
    msg = _unwrap(msg)
    if _has(msg, "imageMessage"):
        field, kind, default, seconds = "imageMessage", "image", "image/jpeg", 0
    elif _has(msg, "audioMessage"):
        field, kind, default = "audioMessage", "audio", "audio/ogg"
        seconds = int(msg.audioMessage.seconds)
    else:
        return ()
    copy = type(msg)()
    getattr(copy, field).CopyFrom(getattr(msg, field))
    if kind == "image":
        copy.imageMessage.ClearField("JPEGThumbnail")
    media = getattr(copy, field)
    mime = _text(media.mimetype).split(";")[0].strip() or default
    payload = base64.b64encode(copy.SerializeToString()).decode()
    return (
        MediaItem(
            kind="image" if kind == "image" else "audio",
            mime=mime,
            source={"message": payload},
            size=int(media.fileLength) or None,
            duration_s=seconds or None,
        ),
    )


def _reply_to(msg: Any) -> str | None:
    msg = _unwrap(msg)
    if _has(msg, "extendedTextMessage"):
        stanza = msg.extendedTextMessage.contextInfo.stanzaID
        return _text(stanza) if stanza else None
    return None


def content_fields(msg: Any) -> list[str]:
    return [field.name for field, _ in msg.ListFields()]


def parse_message(ev: Any, clock: Clock = utcnow) -> WaMessage | None:
    """Reduce a neonize ``MessageEv``; None (logged) when it carries nothing to read.
    ``clock`` dates a message that came without a time."""
    info = ev.Info
    source = info.MessageSource
    text = message_text(ev.Message)
    if text is None:
        fields = content_fields(ev.Message)
        if fields and not set(fields) <= _SILENT:
            log.info("whatsapp message %s of unhandled type %s noted as such", info.ID, fields)
            text = f"[Unsupported message: {', '.join(sorted(fields))}]"
        else:
            log.debug("whatsapp message %s without content (%s) skipped", info.ID, fields)
            return None
    sender_phone = phone_of(source.Sender) or phone_of(source.SenderAlt)
    return WaMessage(
        id=_text(info.ID),
        chat=jid_string(source.Chat),
        sender_jid=jid_string(source.Sender),
        sender_phone=sender_phone,
        from_me=bool(source.IsFromMe),
        is_group=bool(source.IsGroup) or source.Chat.Server == GROUP_SERVER,
        timestamp=_timestamp(int(info.Timestamp), clock),
        text=text,
        push_name=_text(info.Pushname or ""),
        reply_to=_reply_to(ev.Message),
        media=media_items(ev.Message),
    )
