"""Chat completion → our neutral assistant message: the adapter's answer side.

Native tool calls become ``ToolCallPart``s (unparseable arguments kept for the
tool to report), and a model that writes its calls as text has them parsed out
(``agent.llm.textcalls``). Kept apart from the adapter for size.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

RAW_ARGUMENTS_KEY = "openai_raw_arguments"
"""provider_data key holding the model's arguments string when it was not valid JSON."""


def parse_completion(
    completion: ChatCompletion,
    tool_names: set[str],
    *,
    text_only: bool = False,
    taken: set[str] | None = None,
) -> ModelResponse:
    """Chat completion → neutral assistant message (text, then tool calls).

    Call ids repeated within the answer, or reusing one in ``taken`` (the history
    sent), are made unique: the API refuses a history where an id repeats.
    """
    if not completion.choices:
        raise ModelError("openai: answer without choices", retryable=True)
    choice = completion.choices[0]
    message = choice.message
    text = message.content or message.refusal or ""
    calls: list[ToolCallPart] = []
    for tc in message.tool_calls or []:
        if tc.type != "function":
            continue
        calls.append(_call_part(tc.id, tc.function.name, tc.function.arguments))
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
    if not text and not calls and choice.finish_reason == "content_filter":
        raise ModelError("openai: answer blocked by the content filter", retryable=False)
    parts: list[TextPart | ToolCallPart] = [TextPart(text=text)] if text else []
    parts.extend(calls)
    usage = completion.usage
    return ModelResponse(
        message=ModelMessage(role="assistant", parts=list(parts)),
        usage=Usage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        ),
        model=completion.model or "",
    )


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
