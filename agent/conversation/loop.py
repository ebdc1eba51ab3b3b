"""The agent loop: ask the model, run the tools it calls, repeat, at most ``max_turns``.

Each turn ends in one of two outcomes: a final answer (no tool calls) or tool
results to send back. An identical repeated call (same name and arguments) is not
run again; the model is told to use the earlier result instead. A call that acts on
the world is keyed by (exchange, call index): when a replayed exchange makes the same
call again, its stored result is returned and nothing is done twice.

Outside text (an MCP result or error, web search results, a contact's words, an
alert's text from outside) reaches the model only inside an untrusted block
(``agent.llm.untrusted``). Whatever path it came by, the run is marked in one place:
just before each request, what the request carries that is new to this run (the
newest message with its note, then every message the run added) is read for such
blocks (``outside_sources``). From then on every call that acts is held for the
owner's approval instead of made (``agent.tools.held``), for the rest of the run. Our
own errors (a timeout, an unknown tool) are plain text and mark nothing. Earlier
exchanges of a chat were marked in their own runs, so they are not read again here; a
saved fact from outside text that rides in the note is (its block marks the run). Sends
and calls held for the owner's approval are asked about as the loop ends, whatever ends
it: one message per exchange, not one per send
(``agent.tools.sending.ask_owner``).

The daily token budget (``agent.spend.budget``): each model call's bound is reserved
before it and settled with its real usage after (freed when it fails): once spent, the
loop ends with its short answer instead of a call, so a turn that crosses the cap keeps
what its last round did and stops there.

Nothing else leaves the loop: a model failure is a ``ModelError`` (the agent answers
with an apology), a tool that fails or arguments that cannot be used are a tool error
(``{"error": ...}``) the model reads. What the model wrote and what tools returned is
made storable first (U+FFFD for what cannot be encoded, nesting bounded).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from agent.context import RunContext
from agent.llm.base import ModelClient, ModelError, unexpected
from agent.llm.types import (
    INVALID_ARGUMENTS_KEY,
    MediaPart,
    ModelMessage,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from agent.llm.untrusted import outside_sources
from agent.spend.budget import BudgetView, request_bound
from agent.tools.base import Toolset
from agent.tools.held import hold_call, read_outside, reason
from agent.tools.sending import ask_owner, held_codes
from channels.delivery.text import MAX_DEPTH, TooDeep, clean_text, clean_value
from storage.repos.effects import call_digest

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
    budget_spent: bool = False
    """The daily token budget stopped it before a model call (``text`` says so)."""


async def _call_once(
    tools: Toolset, call: ToolCallPart, ctx: RunContext, index: int, digest: str
) -> dict[str, Any]:
    """Run one call (result cleaned); one that acts, in an exchange with a stable id,
    at most once."""
    exchange = ctx.run_id
    if exchange is None or not tools.acts(call.name):
        return storable_result(call.name, await _call_or_hold(tools, call, ctx))
    effects = ctx.deps.effects
    earlier = await effects.recall(exchange, index, digest)
    if earlier is not None:
        log.info("replay: %s #%d already done in %s; result reused", call.name, index, exchange)
        return earlier
    outcome = storable_result(call.name, await _call_or_hold(tools, call, ctx))
    await effects.record(exchange, index, call.name, digest, outcome, ctx.now)
    return outcome


async def _call_or_hold(tools: Toolset, call: ToolCallPart, ctx: RunContext) -> dict[str, Any]:
    """The call's result; after outside text, an acting call is held instead."""
    if reason(ctx) and tools.holds(call.name, call.arguments, ctx):
        log.info("held %s for the owner: %s", call.name, reason(ctx))
        return await hold_call(ctx, call.name, call.arguments)
    return await tools.call(call.name, call.arguments, ctx)


def storable_result(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its text cleaned (U+FFFD for what cannot be encoded); an error
    instead when it is nested too deep to keep."""
    try:
        cleaned: dict[str, Any] = clean_value(result)
    except TooDeep:
        return {"error": f"{name} returned a result nested more than {MAX_DEPTH} levels deep"}
    return cleaned


def storable_reply(message: ModelMessage) -> ModelMessage:
    """The model's message as it can be stored and sent on: text cleaned, and a call
    whose arguments nest too deep (or hold what cannot be encoded) marked invalid."""
    parts: list[Any] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            part = part.model_copy(
                update={"text": clean_text(part.text), "provider_data": _data(part.provider_data)}
            )
        elif isinstance(part, ToolCallPart):
            update: dict[str, Any] = {
                "id": clean_text(part.id),
                "name": clean_text(part.name),
                "provider_data": _data(part.provider_data),
            }
            try:
                update["arguments"] = clean_value(part.arguments)
            except TooDeep:
                update["arguments"] = {}
                update["provider_data"] = {
                    **(update["provider_data"] or {}),
                    INVALID_ARGUMENTS_KEY: f"the arguments are nested more than {MAX_DEPTH} "
                    "levels deep",
                }
            part = part.model_copy(update=update)
        parts.append(part)
    return message.model_copy(update={"parts": parts})


def _data(provider_data: dict[str, Any] | None) -> dict[str, Any] | None:
    if provider_data is None:
        return None
    try:
        cleaned: dict[str, Any] = clean_value(provider_data)
    except TooDeep:
        return None
    return cleaned


async def _answer(
    tools: Toolset, call: ToolCallPart, ctx: RunContext, index: int, seen: set[str]
) -> dict[str, Any]:
    """The result of one call the model made; a failure is a tool error, never raised."""
    problem = (call.provider_data or {}).get(INVALID_ARGUMENTS_KEY)
    if problem:
        return {
            "error": f"invalid arguments for {call.name}: {problem}; "
            "call it again with simpler, flatter arguments"
        }
    try:
        key = call_digest(call.name, call.arguments)
        if key in seen:
            return {
                "error": f"duplicate call: {call.name} was already called with these "
                "exact arguments in this exchange; use that earlier result"
            }
        seen.add(key)
        return await _call_once(tools, call, ctx, index, key)
    except Exception:
        log.exception("tool call %s failed", call.name)
        return {"error": f"{call.name} failed unexpectedly; try a different approach"}


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
    outcomes: list[dict[str, Any]] = []
    if ctx.tier == "contact":  # no acting tool is offered either (``ToolCatalog``)
        read_outside(ctx, "a contact's message")
    read = max(0, len(history) - 1)  # earlier exchanges were marked in their own runs
    try:
        budget = ctx.deps.budget
        fixed = request_bound(system, (), specs)  # the same for every call of the loop
        for _ in range(max_turns):
            messages = [*history, *result.messages]
            hold = await budget.reserve(fixed + request_bound("", messages))
            if isinstance(hold, BudgetView):
                result.budget_spent = True
                effects = [e for e in map(effect_of, result.tool_calls, outcomes) if e]
                result.text = budget.spent_reply(
                    hold, tool_calls=result.tool_calls, effects=effects
                )
                return result
            read = _mark_outside(ctx, messages, read)  # the one place a run is marked
            try:
                response = await model.request(system, messages, specs)
            except ModelError:
                await budget.release(hold)
                raise
            except Exception as exc:  # an adapter that let something else through
                await budget.release(hold)
                raise unexpected(model.name, exc) from exc
            except BaseException:  # cancelled (stopping): freed now, or it expires
                await budget.release(hold)
                raise
            result.turns += 1
            result.usage = result.usage + response.usage
            result.model = response.model or model.name
            tokens = response.usage
            first = result.turns == 1
            await budget.settle(
                hold, ctx.kind, result.model, tokens.input_tokens, tokens.output_tokens,
                first=first, cached_input_tokens=tokens.cached_input_tokens,
            )  # fmt: skip
            reply = storable_reply(response.message)
            result.messages.append(reply)
            calls = reply.tool_calls
            if not calls:
                result.text = reply.text.strip()
                return result
            parts: list[TextPart | ToolResultPart] = []
            for call in calls:
                outcome = await _answer(tools, call, ctx, len(result.tool_calls), seen)
                outcomes.append(outcome)
                result.tool_calls.append(call.name)
                parts.append(ToolResultPart(call_id=call.id, name=call.name, result=outcome))
            result.messages.append(ModelMessage(role="tool", parts=list(parts)))
    finally:
        if codes := held_codes(outcomes):
            await _ask_about_held(ctx, codes)
    result.exhausted = True
    result.text = _exhausted_reply(result)
    log.warning("turn cap reached after %d tool calls", len(result.tool_calls))
    return result


EFFECT_CHARS = 120


def effect_of(name: str, outcome: dict[str, Any]) -> str | None:
    """What one call changed, in a few words (``manage_cronjob created "Call Bob" (once,
    tomorrow 09:00)``); None for a call that only read."""
    if "error" in outcome:
        return f"{name} failed ({str(outcome['error'])[:EFFECT_CHARS]})"
    for verb in ("created", "updated", "deleted", "removed", "saved", "forgotten"):
        if verb in outcome:
            what = outcome[verb]
            label = what.get("name") or what.get("id") if isinstance(what, dict) else what
            when = what.get("schedule") if isinstance(what, dict) else None
            text = f'{name} {verb} "{str(label)[:EFFECT_CHARS]}"' if label else f"{name} {verb}"
            return f"{text} ({when})" if when else text
    if outcome.get("held") or outcome.get("status") == "held":
        return f"{name} held for your approval"
    if outcome.get("success"):
        action = outcome.get("action")
        return f"{name} done ({action})" if isinstance(action, str) else f"{name} done"
    return None


def _mark_outside(ctx: RunContext, sent: list[ModelMessage], read: int) -> int:
    """Mark the run with the source of every untrusted block in ``sent[read:]`` (what
    this request carries that no earlier request of the run did); how far is read now."""
    for message in sent[read:]:
        for text in _texts(message):
            for source in outside_sources(text):
                read_outside(ctx, source)
    return len(sent)


def _texts(message: ModelMessage) -> list[str]:
    """The texts a message carries to the model, as they are (not JSON-escaped)."""
    found: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | NotePart):
            found.append(part.text)
        elif isinstance(part, ToolResultPart):
            _strings(part.result, found)
        elif isinstance(part, MediaPart):
            found.append(part.fallback_text())
    return found


def _strings(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            into.append(str(key))
            _strings(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, into)


async def _ask_about_held(ctx: RunContext, codes: list[str]) -> None:
    """The owner's one question about what this exchange held (``codes``); never
    raised: the exchange's own outcome stands either way."""
    try:
        await ask_owner(ctx, codes)
    except Exception:
        log.exception("could not ask the owner about held sends %s", ", ".join(codes))


def _exhausted_reply(result: LoopResult) -> str:
    used = sorted(set(result.tool_calls))
    return (
        f"I ran out of steps before finishing ({len(result.tool_calls)} tool calls: "
        f"{', '.join(used)}). Part of the work may be done; ask me to continue or to "
        "check what was saved."
    )
