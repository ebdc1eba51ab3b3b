"""Chat completion → our neutral assistant message: the adapter's answer side.

Native tool calls become ``ToolCallPart``s (unparseable arguments kept for the
tool to report), and a model that writes its calls as text has them parsed out
(``agent.llm.textcalls``). Kept apart from the adapter for size.
"""

from __future__ import annotations

import json
from typing import Any

from agent.llm import textcalls
from agent.llm.base import ModelError
from agent.llm.types import (
    INVALID_ARGUMENTS_KEY,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    Usage,
    new_call_id,
    unique_ids,
)

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
