"""The user's turn with the photos and voice notes of its message (or burst).

The channels store each file in GridFS and list it in the inbox row's ``media``
(``channels.delivery.media``). Here the stored items of the exchange's inbox row(s) become
``MediaPart``s with their bytes, for this exchange only: photos downscaled
(``agent.llm.images``, one decode at a time across the agent: ``AgentDeps.images``),
one with more pixels than ``media_max_pixels`` not decoded at
all and a line in the text saying so instead; a voice note for a model that cannot
hear is transcribed once (``agent.llm.transcribe``, only when an OpenAI client is
configured; else a marker) and the transcript kept with the message, so a replay or a
later turn reuses it.
When the primary hears (Gemini) and the fallback cannot (OpenAI), the note goes as
audio and is transcribed only if the fallback is used. What history stores is
``without_media(turn)``: the text and one line per item, never the bytes.

A contact's media sits inside its ``third_party_message`` block, like its text, and
its transcript is defused the same way (it cannot close the block).

Items still pending (announced, not yet downloaded) are fetched here first
(``fetch_pending``): every exchange that reaches the model builds its turn here, so a
plain message and a reply about an alert alike get their media, and nothing that
never reaches the model (a stranger, a command, a directive) downloads any.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from bson import ObjectId

from agent.context import RunContext
from agent.conversation.prompt import mark_untrusted
from agent.llm.base import ModelClient
from agent.llm.images import (
    OversizedImage,
    gemini_image_tokens,
    openai_image_tokens,
)
from agent.llm.transcribe import Transcriber, adapters, native_media, transcriber_for
from agent.llm.types import MediaPart, ModelMessage, TextPart, user_message
from storage.repos.inbox import InboxRow, MediaEntry, burst_rows
from storage.repos.media_files import MediaStore

log = logging.getLogger(__name__)
Item = tuple[ObjectId, int, MediaEntry]
"""An inbox row's id, the item's index in its ``media`` list, and the item."""


class MediaFetch(Protocol):
    """Downloads and stores the pending media of one inbox row (``channels.delivery.media``'s
    ``MediaFetcher``); returns a note for each item the model cannot have."""

    async def fetch_row(self, row: InboxRow) -> list[str]: ...


def may_have_media(ctx: RunContext) -> bool:
    """Whether the exchange's message (or burst) may carry media: a stored message that
    did not say it has none. Otherwise its turn is its text alone (``user_message``)."""
    return ctx.has_media and ctx.inbox_id is not None and ObjectId.is_valid(ctx.inbox_id)


async def _rows(ctx: RunContext) -> list[InboxRow]:
    """The inbox rows of the exchange's message, or of every message of its burst."""
    if ctx.inbox_id is None or not may_have_media(ctx):
        return []
    return await burst_rows(ctx.deps.db, ctx.inbox_id)


async def fetch_pending(ctx: RunContext, fetch: MediaFetch) -> list[str]:
    """Fetch what the exchange's message (or burst) still has pending: the media of a
    message the model is about to read, and only then (never a stranger's, never for
    a directive). The notes of the items not stored."""
    notes: list[str] = []
    for row in await _rows(ctx):
        if row.media:
            notes += await fetch.fetch_row(row)
    return notes


async def stored_media(ctx: RunContext) -> list[Item]:
    """The stored media of the exchange's message, or of every message of its burst."""
    return [
        (row.id, index, item)
        for row in await _rows(ctx)
        for index, item in enumerate(row.media)
        if item.status == "stored" and item.file_id is not None
    ]


def with_notes(text: str, notes: Sequence[str], *, contact: bool) -> str:
    """``text`` with a line per note; inside a contact's block, defused like its text."""
    if not notes:
        return text
    closing = _closing_tag()
    if contact and text.endswith(closing):
        body = text[: -len(closing)].rstrip("\n")
        return "\n".join([body, *(_defused(note) for note in notes), closing])
    return "\n".join([text, *notes])


async def user_turn(
    text: str, ctx: RunContext, model: ModelClient, fetch: MediaFetch | None = None
) -> ModelMessage:
    """The user's message for this exchange: ``text`` and its media as parts. With
    ``fetch``, what is still pending is fetched first: every exchange that reaches the
    model comes through here, whichever way it came (a plain message, a reply about
    an alert)."""
    if fetch is not None:
        text = with_notes(text, await fetch_pending(ctx, fetch), contact=ctx.tier == "contact")
    items = await stored_media(ctx)
    if not items:
        return user_message(text)
    hears = "audio" in native_media(model)
    needs_text = any(i.kind == "audio" and i.transcript is None for _, _, i in items)
    transcribe_model = ctx.deps.settings.openai_transcribe_model
    transcriber = transcriber_for(model, transcribe_model) if needs_text and not hears else None
    store = MediaStore(ctx.deps.db)
    try:
        made = [await _media_part(store, transcriber, item, ctx, hears=hears) for item in items]
    finally:
        if transcriber is not None:
            await transcriber.aclose()
    if hears and needs_text and any("audio" not in native_media(a) for a in adapters(model)):
        for part, item in zip(made, items, strict=True):
            if not isinstance(part, MediaPart):
                continue  # a photo too large to look at
            if part.media_kind == "audio" and part.transcript is None and part.data is not None:
                part.transcribe_later = functools.partial(
                    _transcribe_late, part, store, model, item, ctx
                )
    parts = [p for p in made if isinstance(p, MediaPart)]
    notes = [p for p in made if isinstance(p, str)]
    return assemble(text, parts, contact=ctx.tier == "contact", notes=notes)


async def _transcribe_late(
    part: MediaPart, store: MediaStore, model: ModelClient, item: Item, ctx: RunContext
) -> None:
    """The fallback cannot hear ``part``: its transcript, made now and kept (or none)."""
    transcriber = transcriber_for(model, ctx.deps.settings.openai_transcribe_model)
    if transcriber is None or part.data is None:
        return
    inbox_id, index, _doc = item
    async with transcriber:
        transcript = await transcriber.transcribe(part.data, part.mime)
    if transcript is None:
        return  # the fallback gets the marker
    part.transcript = _defused(transcript) if ctx.tier == "contact" else transcript
    try:
        await store.set_transcript(inbox_id, index, transcript)
    except Exception as exc:  # kept for this exchange only; made again by a replay
        log.warning("a transcript could not be kept: %s: %s", type(exc).__name__, exc)


async def _media_part(
    store: MediaStore,
    transcriber: Transcriber | None,
    item: Item,
    ctx: RunContext,
    *,
    hears: bool,
) -> MediaPart | str:
    """The item as a part; a photo with too many pixels (not decoded) as its note."""
    inbox_id, index, entry = item
    kind: Literal["image", "audio"] = "audio" if entry.kind == "audio" else "image"
    mime, transcript, file_id = entry.mime, entry.transcript, str(entry.file_id)
    data: bytes | None = None
    if kind == "image" or hears or (transcript is None and transcriber is not None):
        data = await _load(store, file_id)
    if kind == "image" and data is not None:
        settings = ctx.deps.settings
        prepared = await ctx.deps.images.prepare(
            data, settings.media_image_max_edge, max_pixels=settings.media_max_pixels
        )
        if isinstance(prepared, OversizedImage):
            log.warning("photo %s not decoded: %s", file_id, prepared.note)
            return prepared.note
        if prepared is None:
            data = None
        else:
            data, mime = prepared.data, prepared.mime
            log.info(
                "photo %dx%d, %d bytes: about %d tokens (OpenAI), %d (Gemini)",
                prepared.width,
                prepared.height,
                len(prepared.data),
                openai_image_tokens(prepared.width, prepared.height),
                gemini_image_tokens(prepared.width, prepared.height),
            )
    if kind == "audio" and not hears:
        if transcript is None and transcriber is not None and data is not None:
            transcript = await transcriber.transcribe(data, mime)
            if transcript is not None:
                await store.set_transcript(inbox_id, index, transcript)
        data = None  # this model cannot hear it: the transcript (or a marker) stands in
    if transcript is not None and ctx.tier == "contact":
        transcript = _defused(transcript)
    return MediaPart(
        media_kind=kind,
        mime=mime,
        file_id=file_id,
        transcript=transcript,
        duration_s=entry.duration_s,
        data=data,
    )


async def _load(store: MediaStore, file_id: str) -> bytes | None:
    try:
        return await store.get(file_id)
    except Exception as exc:  # gone from GridFS, or the database failed: a marker
        log.warning("media %s could not be loaded: %s: %s", file_id, type(exc).__name__, exc)
        return None


def _closing_tag() -> str:
    return mark_untrusted("", "").rsplit("\n", 1)[-1]


def _defused(text: str) -> str:
    """``text`` as ``mark_untrusted`` puts it inside the block (tags defused)."""
    wrapped = mark_untrusted(text, "")
    return wrapped.split("\n", 1)[1].rsplit("\n", 1)[0]


def assemble(
    text: str, media: list[MediaPart], *, contact: bool, notes: Sequence[str] = ()
) -> ModelMessage:
    """Text (with a line per note on media the model cannot have) then media; a
    contact's media goes inside its block, before the closing tag."""
    head, tail = text, ""
    closing = _closing_tag()
    if contact and text.endswith(closing):
        head, tail = text[: -len(closing)].rstrip("\n"), closing
    head = "\n".join(line for line in (head, *notes) if line)
    parts: list[Any] = [TextPart(text=head)] if head else []
    parts.extend(media)
    if tail:
        parts.append(TextPart(text=tail))
    return ModelMessage(role="user", parts=parts)
