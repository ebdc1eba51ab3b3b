"""Provider-neutral conversation parts.

Every part carries a ``kind`` literal so a whole history round-trips through one
TypeAdapter to MongoDB and back. Provider-specific opaque data (Gemini thought
signatures, for instance) rides along in ``provider_data`` and is sent back
unchanged by the adapter that produced it. A ``MediaPart`` (a photo or a voice note)
carries its bytes only in memory, for the exchange it arrived in: ``data`` is never
dumped, and stored history holds its text fallback instead.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_serializer

from storage.ejson import storable_ints

# What a part holds is dumped as MongoDB can store it (``storable_ints``): an integer
# beyond int64 (a model may write one; a tool may return one) as its decimal text, any
# other value itself. The tool itself refused such an argument before it ran
# (``agent.tools.base``). A part without the field (no ``provider_data``: every plain
# text) is not looked at.


class TextPart(BaseModel):
    kind: Literal["text"] = "text"
    text: str
    provider_data: dict[str, Any] | None = None

    @field_serializer("provider_data", when_used="unless-none")
    def _dump_data(self, value: dict[str, Any]) -> Any:
        return storable_ints(value)


class ToolCallPart(BaseModel):
    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    provider_data: dict[str, Any] | None = None

    @field_serializer("arguments", "provider_data", when_used="unless-none")
    def _dump_values(self, value: dict[str, Any]) -> Any:
        return storable_ints(value)


class ToolResultPart(BaseModel):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    result: dict[str, Any]

    @field_serializer("result")
    def _dump_result(self, value: dict[str, Any]) -> Any:
        return storable_ints(value)


class MediaPart(BaseModel):
    """A photo or a voice note of the user's message (GridFS ``file_id``).

    ``data`` holds the bytes for this exchange only and is excluded from every dump,
    so nothing stored carries them; ``transcript`` is the voice note's text, when made.
    """

    kind: Literal["media"] = "media"
    media_kind: Literal["image", "audio"]
    mime: str
    file_id: str
    transcript: str | None = None
    duration_s: int | None = None
    data: bytes | None = Field(default=None, exclude=True, repr=False)
    transcribe_later: Callable[[], Awaitable[None]] | None = Field(
        default=None, exclude=True, repr=False
    )
    """Set on a voice note sent to a model that hears it when its fallback cannot: the
    fallback, if used, calls it first and gets the transcript instead of a marker."""

    def fallback_text(self) -> str:
        """The one line a model (or a later turn) gets instead of the bytes."""
        if self.media_kind == "image":
            return "[photo]"
        length = f", {self.duration_s // 60}:{self.duration_s % 60:02d}" if self.duration_s else ""
        if self.transcript is not None and self.transcript.strip():
            return f"[voice note{length}, transcript]: {self.transcript.strip()}"
        if self.transcript is not None:
            return f"[voice note{length}: no words in it]"
        return f"[voice note{length}]"


class NotePart(BaseModel):
    """Watchkeeper's note after the newest message: what changes between requests (the
    clock, the pulse's state). Sent with one exchange's requests and never stored, so
    the message's own parts (``text``) stay the sender's words as written; adapters send
    it as a text part of its own (``agent.conversation.prompt``)."""

    kind: Literal["note"] = "note"
    text: str


Part = Annotated[
    TextPart | ToolCallPart | ToolResultPart | MediaPart | NotePart, Field(discriminator="kind")
]


class ModelMessage(BaseModel):
    """One turn: ``user`` (text), ``assistant`` (text and tool calls) or ``tool`` (results)."""

    role: Literal["user", "assistant", "tool"]
    parts: list[Part]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def media(self) -> list[MediaPart]:
        return [p for p in self.parts if isinstance(p, MediaPart)]

    @property
    def note(self) -> str:
        """Watchkeeper's note riding on this message (``NotePart``), if any."""
        return "\n\n".join(p.text for p in self.parts if isinstance(p, NotePart))


MessagesAdapter: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage])


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (OpenAI
    ``prompt_tokens_details.cached_tokens``, Gemini ``cachedContentTokenCount``)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


MAX_OUTPUT_TOKENS = 8192
"""The most tokens a model may write in one answer (``MAX_OUTPUT_TOKENS``; its reasoning
included): every adapter asks for it, so a call's cost is bounded before it is made
(``agent.spend.budget``)."""


class ModelResponse(BaseModel):
    message: ModelMessage
    usage: Usage = Field(default_factory=Usage)
    model: str = ""


class ToolSpec(BaseModel):
    """What the model is told about a tool: name, description, JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    @cached_property
    def request_bytes(self) -> int:
        """Bytes the tool adds to a request (name, description, schema as JSON): the
        budget's bound of every request offering it, measured once per spec (a tool's
        spec is shared, ``Tool.spec``)."""
        size = len(self.name) + len(self.description.encode("utf-8", "replace"))
        return size + len(json.dumps(self.parameters, default=str))


def new_call_id() -> str:
    """An id for a tool call the provider sent without one (Gemini, text-mode calls);
    random, so ids in stored histories never collide across restarts."""
    return f"call_{uuid.uuid4().hex[:12]}"


INVALID_ARGUMENTS_KEY = "invalid_arguments"
"""provider_data key: why the call's arguments could not be used (the call gets ``{}``
and the loop answers it with a tool error instead of running it)."""


def call_ids(messages: list[ModelMessage]) -> set[str]:
    """Every tool-call id already in ``messages`` (what a new call must not reuse)."""
    return {call.id for message in messages for call in message.tool_calls}


def unique_ids(ids: list[str], taken: set[str]) -> list[str]:
    """``ids`` with repeats renamed (``call_0`` again becomes ``call_0_2``), so that no
    id repeats within them or reuses one in ``taken``; an id's first free use keeps it.

    Some servers give two calls of one answer the same id (or reuse ``call_0`` every
    turn); the real APIs then refuse every later request that carries that history.
    """
    seen = set(taken)
    out: list[str] = []
    for call_id in ids:
        fresh, n = call_id, 1
        while fresh in seen:
            n += 1
            fresh = f"{call_id}_{n}"
        seen.add(fresh)
        out.append(fresh)
    return out


def user_message(text: str) -> ModelMessage:
    return ModelMessage(role="user", parts=[TextPart(text=text)])


def with_note(message: ModelMessage, note: str) -> ModelMessage:
    """``message`` with ``note`` as a part of its own after the sender's parts, for one
    exchange only: the parts before it are the same objects, so what a request does to
    them (a voice note transcribed) is in the message that is stored, without it."""
    if not note:
        return message
    return message.model_copy(update={"parts": [*message.parts, NotePart(text=note)]})


def without_media(message: ModelMessage) -> ModelMessage:
    """``message`` with each media part replaced by its text fallback, merged into one
    text part (what history stores, and what a model that cannot take media gets)."""
    if not message.media:
        return message
    chunks = [
        p.text if isinstance(p, TextPart) else p.fallback_text()
        for p in message.parts
        if isinstance(p, TextPart | MediaPart)
    ]
    others = [p for p in message.parts if not isinstance(p, TextPart | MediaPart)]
    text = "\n".join(c for c in chunks if c)
    return message.model_copy(update={"parts": [TextPart(text=text), *others]})


def assistant_message(text: str) -> ModelMessage:
    return ModelMessage(role="assistant", parts=[TextPart(text=text)])
