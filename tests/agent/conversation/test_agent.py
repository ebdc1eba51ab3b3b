"""The agent service on a real database with a scripted model: memory, history, restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agent.context import AgentDeps, RunContext
from agent.conversation.agent import APOLOGY, Agent
from agent.llm.types import ModelMessage, TextPart, ToolResultPart
from agent.tools.catalog import core_catalog
from storage.db import open_database
from storage.repos.memories import FactSource, MemoryStore
from tests.conftest import make_settings
from tests.contexts import agent_deps, owner_ctx
from tests.fakes.scripted import Request, ScriptedModel, sequence, unavailable


def _agent(model: ScriptedModel) -> Agent:
    return Agent(model, core_catalog())


def said(deps: AgentDeps, words: str) -> tuple[str, RunContext]:
    """The owner's chat message ``words`` and its run, as the dispatcher makes it."""
    return words, owner_ctx(deps, owner_words=words)


async def test_save_memory_is_stored_and_shown_next_time(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "ok")
    model.responder = sequence(model.call("save_memory", memory="- owner likes tea"), "Noted.")
    reply = await _agent(model).respond(*said(deps, "remember I like tea"))
    assert reply.text == "Noted."
    assert [f.text for f in await MemoryStore(deps.db).all()] == ["- owner likes tea"]
    model.responder = sequence("hello")
    await _agent(model).respond(*said(deps, "do I like tea?"))
    assert "- owner likes tea" in model.requests[-1].read


async def test_memory_over_limit_is_refused_and_not_written(deps: AgentDeps) -> None:
    await MemoryStore(deps.db).add("old", FactSource(), deps.clock())
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(model.call("save_memory", memory="x" * 501), "Too long, sorry.")
    await _agent(model).respond(*said(deps, "remember a lot"))
    tool_msg = model.requests[1].messages[-1]
    result = tool_msg.parts[0]
    assert isinstance(result, ToolResultPart)
    assert "501" in result.result["error"] and "500" in result.result["error"]
    assert [f.text for f in await MemoryStore(deps.db).all()] == ["old"]


async def test_exactly_500_characters_is_accepted(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(model.call("save_memory", memory="y" * 500), "saved")
    await _agent(model).respond(*said(deps, "remember"))
    assert [len(f.text) for f in await MemoryStore(deps.db).all()] == [500]


async def test_history_is_kept_within_the_token_budget(deps: AgentDeps) -> None:
    deps.settings.history_token_budget = 1_000
    model = ScriptedModel(lambda r: "ack " + "word " * 100)
    agent = _agent(model)
    for i in range(30):
        await agent.respond(f"message number {i} " + "filler " * 100, owner_ctx(deps))
    last = model.requests[-1].messages
    texts = [m.text for m in last]
    assert texts[-1].startswith("message number 29")
    assert not any(t.startswith("message number 0 ") for t in texts)
    assert last[0].role == "user"  # oldest turns dropped whole, never mid-exchange
    assert 2 < len(last) < 20


async def test_old_long_tool_outputs_are_shortened(deps: AgentDeps) -> None:
    await deps.db["ai_big"].insert_many([{"n": i, "pad": "z" * 200} for i in range(40)])
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        model.call("db_query", operation="find", collection="ai_big", limit=40), "found them"
    )
    agent = _agent(model)
    await agent.respond("list big", owner_ctx(deps))
    full = model.requests[1].messages[-1].parts[0]
    assert isinstance(full, ToolResultPart) and len(full.result["rows"]) == 40
    model.responder = sequence("sure")
    await agent.respond("next", owner_ctx(deps))
    old = [p for m in model.requests[-1].messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert old and old[0].result.get("note") == "shortened in history"


async def test_model_failure_apologises_and_keeps_the_message(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: unavailable())
    reply = await _agent(model).respond("are you there?", owner_ctx(deps))
    assert reply.failed and reply.text == APOLOGY
    assert "fake outage" not in reply.text
    stored = await deps.db["messages"].find_one({"role": "user"})
    assert stored is not None and stored["parts"][0]["text"] == "are you there?"


async def test_turn_cap_gives_an_honest_reply(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "")
    counter = iter(range(100))
    model.responder = lambda r: model.call(
        "db_query", operation="countDocuments", collection="ai_x", filter={"n": next(counter)}
    )
    reply = await _agent(model).respond("loop forever", owner_ctx(deps))
    assert len(model.requests) == 8
    assert reply.exhausted and "ran out of steps" in reply.text


async def test_usage_is_recorded_per_exchange(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(model.call("save_memory", memory="m"), "done")
    await _agent(model).respond("x", owner_ctx(deps))
    final = await deps.db["messages"].find_one({"role": "assistant", "usage": {"$exists": True}})
    assert final is not None
    assert final["usage"] == {"input_tokens": 20, "output_tokens": 10, "cached_input_tokens": 0}
    assert final["tool_calls"] == ["save_memory"]


async def test_restart_keeps_memory_and_conversation(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path / "data", openai_api_key="k")

    def recall(req: Request) -> str:
        return "history: " + " | ".join(m.text for m in req.messages if m.role == "user")

    for round_ in ("first", "second"):
        async with (
            open_database(None, "watchkeeper", settings.data_dir) as database,
            aiohttp.ClientSession() as http,
        ):
            deps = agent_deps(settings, database.db, http)
            model = ScriptedModel(recall)
            if round_ == "first":
                await MemoryStore(deps.db).add("- prefers metric units", FactSource(), deps.clock())
            reply = await _agent(model).respond(*said(deps, f"{round_} message, in which units?"))
    assert reply.text == (
        "history: first message, in which units? | second message, in which units?"
    )
    assert "- prefers metric units" in model.requests[-1].read


async def test_reset_starts_a_new_conversation(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: f"{len(r.messages)} messages")
    agent = _agent(model)
    ctx = owner_ctx(deps)
    await agent.respond("one", ctx)
    assert (await agent.respond("two", ctx)).text == "3 messages"
    await deps.conversations.reset(ctx.conversation_key)
    assert (await agent.respond("three", ctx)).text == "1 messages"


def test_message_parts_round_trip() -> None:
    m = ModelMessage(role="assistant", parts=[TextPart(text="x", provider_data={"sig": "abc"})])
    assert ModelMessage.model_validate(m.model_dump(mode="json")) == m


async def test_a_replayed_message_reuses_the_stored_answer(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "the answer")
    agent = _agent(model)
    ctx = owner_ctx(deps, inbox_id="abc123")
    assert (await agent.respond("question", ctx)).text == "the answer"
    # The process died before the reply reached the outbox; the message is handled again.
    replay = owner_ctx(deps, inbox_id="abc123", replay=True)
    again = await agent.respond("question", replay)
    assert again.text == "the answer" and len(model.requests) == 1
    assert await deps.db["messages"].count_documents({"role": "user"}) == 1


async def test_a_replay_after_a_model_failure_asks_the_model_again(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: unavailable())
    agent = _agent(model)
    await agent.respond("question", owner_ctx(deps, inbox_id="x1"))
    model.responder = sequence("now it works")
    replay = owner_ctx(deps, inbox_id="x1", replay=True)
    assert (await agent.respond("question", replay)).text == "now it works"


def test_tool_schemas_keep_every_argument_name() -> None:
    from pydantic import BaseModel, Field

    from agent.tools.base import compact_schema

    class Args(BaseModel):
        title: str = Field(description="an argument that shares a schema keyword's name")
        properties: dict[str, str] | None = None

    schema = compact_schema(Args)
    assert set(schema["properties"]) == {"title", "properties"}
    assert "title" not in schema["properties"]["title"]  # the keyword itself is dropped
    assert schema["required"] == ["title"]


class Loading(ScriptedModel):
    """A model whose SDK "loads" when ``warm`` is called, counting the loads."""

    warmed = 0

    async def warm(self) -> None:
        self.warmed += 1


async def test_the_first_exchange_loads_the_model_sdk_once(deps: AgentDeps) -> None:
    """``watchkeeper chat`` loads no SDK before it is asked something: the first
    exchange starts loading it, once, and the answer still comes."""
    model = Loading(lambda r: "hello")
    agent = _agent(model)
    assert model.warmed == 0
    assert (await agent.respond("hi", owner_ctx(deps))).text == "hello"
    await asyncio.wait_for(agent.load_model(), 10)  # returns once the same load is over
    assert (await agent.respond("again", owner_ctx(deps))).text == "hello"
    assert model.warmed == 1


async def test_load_model_loads_it_before_any_exchange_once(deps: AgentDeps) -> None:
    """``watchkeeper run`` loads the SDK once it serves (then freezes its objects): the
    first answer does not wait for the import, and nothing loads it a second time."""
    model = Loading(lambda r: "hello")
    agent = _agent(model)
    await asyncio.wait_for(agent.load_model(), 10)
    assert model.warmed == 1
    assert (await agent.respond("hi", owner_ctx(deps))).text == "hello"
    await asyncio.wait_for(agent.load_model(), 10)
    assert model.warmed == 1
