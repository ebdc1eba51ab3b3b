"""Fitting stored history into the input-token budget.

Token counts are computed once, when a message is stored, with the offline
``o200k_base`` encoding, so fitting history costs no tokenising per request.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from agent.llm.types import ModelMessage, TextPart, ToolCallPart, ToolResultPart

TOOL_OUTPUT_KEEP = 1_200
"""Characters of an old tool result kept in history; the current exchange keeps all."""


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import quicktok

    return quicktok.get_encoding("o200k_base")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text))


def message_text(message: ModelMessage) -> str:
    chunks: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            chunks.append(part.text)
        elif isinstance(part, ToolCallPart):
            chunks.append(part.name + json.dumps(part.arguments, default=str))
        else:
            chunks.append(json.dumps(part.result, default=str))
    return "\n".join(chunks)


def message_tokens(message: ModelMessage) -> int:
    return count_tokens(message_text(message)) + 4


def shorten_tool_results(message: ModelMessage, keep: int = TOOL_OUTPUT_KEEP) -> ModelMessage:
    """Old tool outputs are cut to ``keep`` characters; the model can query again."""
    if message.role != "tool":
        return message
    parts: list[Any] = []
    changed = False
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            raw = json.dumps(part.result, default=str)
            if len(raw) > keep:
                changed = True
                part = part.model_copy(
                    update={"result": {"truncated": raw[:keep], "note": "shortened in history"}}
                )
        parts.append(part)
    return message.model_copy(update={"parts": parts}) if changed else message


def fit_history(messages: list[ModelMessage], tokens: list[int], budget: int) -> list[ModelMessage]:
    """Keep the newest messages whose total fits ``budget``, dropping oldest turns first.

    History always starts at a user message, so a tool result is never separated
    from the call that produced it.
    """
    total = 0
    start = len(messages)
    for i in range(len(messages) - 1, -1, -1):
        if total + tokens[i] > budget:
            break
        total += tokens[i]
        start = i
    while start < len(messages) and messages[start].role != "user":
        start += 1
    return [shorten_tool_results(m) for m in messages[start:]]
