"""Text hygiene: what cannot be encoded as UTF-8 becomes U+FFFD where text comes in.

A lone UTF-16 surrogate (JSON allows ``"\\ud83d"`` alone; Telegram and model servers
send them) or bytes that are not UTF-8 (a terminal, a protobuf field) cannot be stored
in MongoDB nor sent anywhere: the encoder raises. Every entrance (each channel, the
HTTP API, the pipeline before its inbox write, model output, tool results) passes its
text through ``clean_text``; values with nested strings through ``clean_value``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from channels.types import InboundMessage

REPLACEMENT = "\ufffd"
MAX_DEPTH = 64
"""Deepest nesting kept (MongoDB refuses documents nested more than 100 levels, and a
stored message wraps what it holds in a few levels of its own)."""


class TooDeep(ValueError):
    """A value nested deeper than its limit."""


def clean_text(value: str | bytes | bytearray) -> str:
    """``value`` as text that encodes as UTF-8; unencodable parts become U+FFFD.

    Bytes are decoded as UTF-8. In text, a surrogate pair split into two code points is
    joined, and each lone surrogate (including a ``surrogateescape``'d byte) is replaced.
    """
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def clean_value(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` with every string (keys included) cleaned; dicts, lists and tuples are
    copied, anything else is kept as it is. A NUL in a key (never storable) becomes
    U+FFFD too. Raises ``TooDeep`` when containers nest more than ``max_depth`` levels.
    """
    return _clean(value, max_depth)


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, dict):
        if depth <= 0:
            raise TooDeep("nested too deep")
        return {_key(k): _clean(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            raise TooDeep("nested too deep")
        items = [_clean(v, depth - 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _key(key: Any) -> Any:
    return clean_text(key).replace("\x00", REPLACEMENT) if isinstance(key, str) else key


def clean_inbound(message: InboundMessage) -> InboundMessage:
    """``message`` with every text field storable; ``TooDeep`` for absurdly nested meta."""
    return dataclasses.replace(
        message,
        external_id=clean_text(message.external_id),
        chat_id=clean_text(message.chat_id),
        sender_id=clean_text(message.sender_id),
        text=clean_text(message.text),
        sender_name=clean_text(message.sender_name),
        reply_to=clean_text(message.reply_to) if message.reply_to is not None else None,
        meta=clean_value(message.meta),
    )
