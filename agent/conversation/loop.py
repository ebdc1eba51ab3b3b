"""The agent loop: ask the model, run the tools it calls, repeat, at most ``max_turns``.

Each turn ends in one of two outcomes: a final answer (no tool calls) or tool
results to send back. An identical repeated call (same name and arguments) is not
run again; the model is told to use the earlier result instead. A call that acts on
the world is keyed by (exchange, call index): when a replayed exchange makes the same
call again, its stored result is returned and nothing is done twice.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from agent.context import RunContext
from agent.llm.base import ModelClient
from agent.llm.types import ModelMessage, TextPart, ToolCallPart, ToolResultPart, Usage
from agent.tools.base import Toolset
from storage.effects import call_digest

log = logging.getLogger(__name__)
MAX_TURNS = 8


@dataclass
class LoopResult:
    text: str
    messages: list[ModelMessage]
    """The assistant and tool messages this exchange added, in order."""
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[str] = field(default_factory=list)
    turns: int = 0
    model: str = ""
    exhausted: bool = False


def _call_key(name: str, arguments: object) -> str:
    return name + ":" + json.dumps(arguments, sort_keys=True, default=str)


async def _call_once(
    tools: Toolset, call: ToolCallPart, ctx: RunContext, index: int
) -> dict[str, Any]:
    """Run one call; one that acts, in an exchange with a stable id, at most once."""
    exchange = ctx.run_id
    if exchange is None or not tools.acts(call.name):
        return await tools.call(call.name, call.arguments, ctx)
    effects = ctx.deps.effects
    digest = call_digest(call.name, call.arguments)
    earlier = await effects.recall(exchange, index, digest)
    if earlier is not None:
        log.info("replay: %s #%d already done in %s; result reused", call.name, index, exchange)
        return earlier
    outcome = await tools.call(call.name, call.arguments, ctx)
    await effects.record(exchange, index, call.name, digest, outcome, ctx.now)
    return outcome


async def run_loop(
    model: ModelClient,
    system: str,
    history: list[ModelMessage],
    tools: Toolset,
    ctx: RunContext,
    max_turns: int = MAX_TURNS,
) -> LoopResult:
    result = LoopResult(text="", messages=[])
    specs = tools.specs()
    seen: set[str] = set()
    for _ in range(max_turns):
        response = await model.request(system, [*history, *result.messages], specs)
        result.turns += 1
        result.usage = result.usage + response.usage
        result.model = response.model or model.name
        reply = response.message
        result.messages.append(reply)
        calls = reply.tool_calls
        if not calls:
            result.text = reply.text.strip()
            return result
        parts: list[TextPart | ToolResultPart] = []
        for call in calls:
            key = _call_key(call.name, call.arguments)
            if key in seen:
                outcome = {
                    "error": f"duplicate call: {call.name} was already called with these "
                    "exact arguments in this exchange; use that earlier result"
                }
            else:
                seen.add(key)
                outcome = await _call_once(tools, call, ctx, len(result.tool_calls))
            result.tool_calls.append(call.name)
            parts.append(ToolResultPart(call_id=call.id, name=call.name, result=outcome))
        result.messages.append(ModelMessage(role="tool", parts=list(parts)))
    result.exhausted = True
    result.text = _exhausted_reply(result)
    log.warning("turn cap reached after %d tool calls", len(result.tool_calls))
    return result


def _exhausted_reply(result: LoopResult) -> str:
    used = sorted(set(result.tool_calls))
    return (
        f"I ran out of steps before finishing ({len(result.tool_calls)} tool calls: "
        f"{', '.join(used)}). Part of the work may be done; ask me to continue or to "
        "check what was saved."
    )
