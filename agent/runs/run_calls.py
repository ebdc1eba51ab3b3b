"""A run's tool calls in short, for its record: name, arguments and result in a line each.

The record keeps only these lines (``calls``), not the whole exchange, so the
dashboard's run page reads one document; the full messages stay in the run's
conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent.llm.types import ModelMessage, ToolCallPart, ToolResultPart

Doc = dict[str, Any]
MAX_CALLS = 20
TEXT_LIMIT = 200


def short_json(value: Any, limit: int = TEXT_LIMIT) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_summaries(steps: Sequence[ModelMessage]) -> list[Doc]:
    """Each tool call of ``steps`` in order (at most ``MAX_CALLS``), with its result."""
    results: dict[str, ToolResultPart] = {}
    calls: list[ToolCallPart] = []
    for message in steps:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.append(part)
            elif isinstance(part, ToolResultPart):
                results[part.call_id] = part
    summaries: list[Doc] = []
    for call in calls[:MAX_CALLS]:
        result = results.get(call.id)
        summary: Doc = {"name": call.name, "args": short_json(call.arguments)}
        summary["result"] = short_json(result.result) if result is not None else ""
        summaries.append(summary)
    return summaries
