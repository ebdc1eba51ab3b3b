"""Chat completions content for a user turn with photos: ``image_url`` parts.

A photo goes as a data URL (``data:<mime>;base64,...``); a voice note, and a photo
without bytes, as its text fallback. Kept apart from the adapter for size.
"""

from __future__ import annotations

import base64
from typing import Any

from agent.llm.types import MediaPart, ModelMessage, TextPart, without_media


def sends_images(messages: list[ModelMessage]) -> bool:
    return any(p.media_kind == "image" and p.data is not None for m in messages for p in m.media)


def blind(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [without_media(m) for m in messages]


async def transcribe_pending(messages: list[ModelMessage]) -> None:
    """Voice notes left for this model to transcribe (it is the fallback of one that
    hears them): transcribed now, once, so it gets the words rather than a marker."""
    for part in (p for m in messages if m.role == "user" for p in m.media):
        hook, part.transcribe_later = part.transcribe_later, None
        if hook is not None and part.transcript is None:
            await hook()


def user_content(message: ModelMessage) -> str | list[dict[str, Any]]:
    """A user message's content: plain text, or text and ``image_url`` parts when it
    carries photos. A voice note (and a photo without bytes) is its text fallback."""
    if not any(p.media_kind == "image" and p.data is not None for p in message.media):
        return without_media(message).text
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, MediaPart):
            content.append(_media_content(part))
    return content


def _media_content(part: MediaPart) -> dict[str, Any]:
    if part.media_kind != "image" or part.data is None:
        return {"type": "text", "text": part.fallback_text()}
    encoded = base64.b64encode(part.data).decode("ascii")
    mime = part.mime.split(";")[0].strip()
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}


def joined(first: str | list[dict[str, Any]], second: str | list[dict[str, Any]]) -> Any:
    """Two contents of one role as one (text joined; parts when either has images)."""
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    as_parts = [[{"type": "text", "text": c}] if isinstance(c, str) else c for c in (first, second)]
    return as_parts[0] + as_parts[1]
