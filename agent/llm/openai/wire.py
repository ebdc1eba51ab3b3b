"""Chat completions on the wire: the request body from our messages, the answer back.

Requests: neutral history becomes chat completions messages, with native tool calls
and results (``native_messages``) or, for a server that refuses native tools, with the
tool traffic written as text (``text_messages``, ``agent.llm.textcalls``). A user turn
with photos becomes text and ``image_url`` parts (a data URL); a voice note, and a
photo without bytes, its text fallback.

The body is JSON bytes with each tool schema encoded once (``RequestBodies``). Every
request carries the same tool schemas (most of the body: several KB of JSON), so each
tool's encoding is kept by its name and description, with the schema it was made from;
an equal schema (a comparison of dicts, far cheaper than encoding them) reuses it, and a
request encodes only its messages. The bytes go to the SDK as the request's
``content``: its own encoding of a ``body`` dict walks and copies it first, which costs
several times a plain ``json.dumps``. Headers, errors and retries are the SDK's either
way. The encoding is ``json.dumps``, written as the SDK writes its own bodies: UTF-8,
no ASCII escapes, no spaces. Tool results and inbound text reach here cleaned
(``agent.conversation.loop``, ``channels.delivery.text``); should a lone surrogate slip
through anyway (valid in JSON as an escape, impossible in UTF-8), the body goes with
ASCII escapes instead of failing the turn.

Answers: a chat completion becomes our neutral assistant message (``parse_completion``).
Native tool calls become ``ToolCallPart``s (unparseable arguments kept for the tool to
report), and a model that writes its calls as text has them parsed out.
"""

from __future__ import annotations

import base64
import copy
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent.llm import textcalls
from agent.llm.base import ModelError
from agent.llm.types import (
    INVALID_ARGUMENTS_KEY,
    MediaPart,
    ModelMessage,
    ModelResponse,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
    new_call_id,
    unique_ids,
    without_media,
)

KEEP = 256
"""Tool encodings kept: more than the tools offered at once (the core ones, MCP's)."""


def dumps(value: Any) -> str:
    """JSON as the SDK writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class RequestBodies:
    """Encodes request bodies; remembers the last ``KEEP`` tools' encodings."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._tools: OrderedDict[tuple[str, str], tuple[dict[str, Any], str]] = OrderedDict()

    def encode(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[ToolSpec] | None,
        most: tuple[str, int] | None = None,
    ) -> bytes:
        """``{"model", "messages"[, "tools"][, <most's field>]}`` as JSON bytes; tools as
        function tools; ``most``: the field bounding the answer's tokens and its value."""
        head = dumps({"model": model, "messages": messages})
        if tools:
            listed = ",".join(self._tool(t) for t in tools)
            head = f'{head[:-1]},"tools":[{listed}]}}'
        if most is not None:
            head = f"{head[:-1]},{dumps(most[0])}:{int(most[1])}}}"
        try:
            return head.encode()
        except UnicodeEncodeError:  # a lone surrogate: \ud800 in JSON, nothing in UTF-8
            return json.dumps(json.loads(head), separators=(",", ":")).encode()

    def _tool(self, spec: ToolSpec) -> str:
        key = (spec.name, spec.description)
        kept = self._tools.get(key)
        if kept is not None and kept[0] == spec.parameters:
            self._tools.move_to_end(key)
            return kept[1]
        text = dumps(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
        )
        self._tools[key] = (copy.deepcopy(spec.parameters), text)
        while len(self._tools) > self._keep:
            self._tools.popitem(last=False)
        return text

    def __len__(self) -> int:
        return len(self._tools)


def native_messages(system: str, messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Neutral history → chat completions messages with native tool calls and results."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": user_content(message)})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            calls = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in message.tool_calls
            ]
            if calls:
                entry["tool_calls"] = calls
            elif entry["content"] is None:
                entry["content"] = ""
            out.append(entry)
        else:
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": part.call_id,
                            "content": json.dumps(part.result, ensure_ascii=False, default=str),
                        }
                    )
            if message.text:
                out.append({"role": "user", "content": message.text})
    return out


def text_messages(system: str, messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Neutral history → plain chat messages, tool traffic rendered as text blocks.

    Consecutive messages of one role are merged: many chat templates insist on
    alternating user and assistant turns.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        chunks: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart | NotePart):
                if part.text:
                    chunks.append(part.text)
            elif isinstance(part, ToolCallPart):
                chunks.append(textcalls.render_tool_call(part.name, part.arguments))
            elif isinstance(part, ToolResultPart):
                chunks.append(textcalls.render_tool_result(part.name, part.result))
            else:
                chunks.append(part.fallback_text())
        content: str | list[dict[str, Any]] = "\n".join(chunks)
        if message.role == "user" and sends_images([message]):
            content = user_content(message)
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"] = joined(out[-1]["content"], content)
        else:
            out.append({"role": role, "content": content})
    return out


def sends_images(messages: list[ModelMessage]) -> bool:
    return any(p.media_kind == "image" and p.data is not None for m in messages for p in m.media)


def user_content(message: ModelMessage) -> str | list[dict[str, Any]]:
    """A user message's content: plain text, or text and ``image_url`` parts when it
    carries photos. A voice note (and a photo without bytes) is its text fallback. Text
    parts kept apart (the sender's words, then Watchkeeper's note) stay apart, in their
    order: a note before the words (a chat's summary) stays before them."""
    if not any(p.media_kind == "image" and p.data is not None for p in message.media):
        text = without_media(message).text
        if not message.note:
            return text
        lead = 0
        while lead < len(message.parts) and isinstance(message.parts[lead], NotePart):
            lead += 1
        before = [p.text for p in message.parts[:lead] if isinstance(p, NotePart)]
        after = [p.text for p in message.parts[lead:] if isinstance(p, NotePart)]
        return [{"type": "text", "text": t} for t in (*before, text, *after) if t]
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart | NotePart) and part.text:
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


RAW_ARGUMENTS_KEY = "openai_raw_arguments"
"""provider_data key holding the model's arguments string when it was not valid JSON."""
Json = dict[str, Any]


def parse_completion(
    completion: Json,
    tool_names: set[str],
    *,
    text_only: bool = False,
    taken: set[str] | None = None,
) -> ModelResponse:
    """A chat completion's JSON → neutral assistant message (text, then tool calls).

    Read as the wire has it, leniently: a field of the wrong type counts as absent (the
    SDK's ``ChatCompletion`` would have kept it without checking). Call ids repeated
    within the answer, or reusing one in ``taken`` (the history sent), are made unique:
    the API refuses a history where an id repeats.
    """
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ModelError("openai: answer without choices", retryable=True)
    choice = _object(choices[0])
    message = _object(choice.get("message"))
    text = _text(message.get("content")) or _text(message.get("refusal"))
    calls: list[ToolCallPart] = []
    for tc in _list(message.get("tool_calls")):
        call = _object(tc)
        function = _object(call.get("function"))
        name, call_id = function.get("name"), call.get("id")
        if call.get("type", "function") != "function" or not isinstance(name, str):
            continue
        call_id = call_id if isinstance(call_id, str) else None
        calls.append(_call_part(call_id, name, _arguments(function.get("arguments"))))
    if not calls and tool_names and "<tool_call>" in text:
        # Text mode, or a local model that writes its calls as text even when
        # native tools are on: take the blocks that name a tool we offered.
        rest, parsed = textcalls.parse_tool_calls(text)
        if parsed and (text_only or all(c.name in tool_names for c in parsed)):
            text = rest
            calls = [
                ToolCallPart(id=new_call_id(), name=c.name, arguments=c.arguments) for c in parsed
            ]
    fresh = unique_ids([c.id for c in calls], taken or set())
    calls = [
        c if c.id == i else c.model_copy(update={"id": i})
        for c, i in zip(calls, fresh, strict=True)
    ]
    if not text and not calls and choice.get("finish_reason") == "content_filter":
        raise ModelError("openai: answer blocked by the content filter", retryable=False)
    parts: list[TextPart | ToolCallPart] = [TextPart(text=text)] if text else []
    parts.extend(calls)
    usage = _object(completion.get("usage"))
    model = completion.get("model")
    return ModelResponse(
        message=ModelMessage(role="assistant", parts=list(parts)),
        usage=Usage(
            input_tokens=_count(usage, "prompt_tokens"),
            output_tokens=_count(usage, "completion_tokens"),
            cached_input_tokens=_count(
                _object(usage.get("prompt_tokens_details")), "cached_tokens"
            ),
        ),
        model=model if isinstance(model, str) else "",
    )


def _object(value: object) -> Json:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(usage: Json, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _arguments(value: object) -> str | None:
    """The arguments string; an object (some compatible servers send one) as its JSON."""
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def _text(value: object) -> str:
    """``content`` as a string; some compatible servers send a list of text parts."""
    if isinstance(value, str):
        return value
    pieces = [_object(p).get("text") for p in _list(value)]
    return "".join(p for p in pieces if isinstance(p, str))


def _call_part(call_id: str | None, name: str, raw: str | None) -> ToolCallPart:
    """One native call; unparseable arguments become ``{}`` so the tool reports them."""
    provider_data: dict[str, Any] | None = None
    try:
        arguments = json.loads(raw) if raw and raw.strip() else {}
    except json.JSONDecodeError:
        arguments = None
    except RecursionError:  # nested past what the parser can follow
        return ToolCallPart(
            id=call_id or new_call_id(),
            name=name,
            provider_data={INVALID_ARGUMENTS_KEY: "the arguments are nested far too deep"},
        )
    if not isinstance(arguments, dict):
        arguments = {}
        provider_data = {RAW_ARGUMENTS_KEY: raw}
    return ToolCallPart(
        id=call_id or new_call_id(), name=name, arguments=arguments, provider_data=provider_data
    )
