"""A replayed exchange does not act twice: a crash after a tool that acted (a database
write, a message sent), before the answer was stored, then the same exchange again."""

from __future__ import annotations

import contextlib
import uuid

from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.tools.catalog import core_catalog
from tests.contexts import owner_ctx
from tests.fakes.scripted import Request, ScriptedModel


class Crash(BaseException):
    """The process dying mid-exchange: nothing after it runs, no handler catches it."""


async def test_a_replay_reuses_the_result_of_a_database_write(deps: AgentDeps) -> None:
    collection = f"ai_notes_{uuid.uuid4().hex[:8]}"
    insert = {"operation": "insertOne", "collection": collection, "data": {"note": "buy milk"}}
    crashed = [False]

    def respond(request: Request) -> object:
        if not any(m.role == "tool" for m in request.messages):
            return model.call("db_query", **insert)
        if not crashed[0]:
            crashed[0] = True
            raise Crash  # after the write, before the answer
        return "Saved your note."

    model = ScriptedModel(respond)  # type: ignore[arg-type]
    agent = Agent(model, core_catalog())
    inbox_id = uuid.uuid4().hex
    first = owner_ctx(deps, inbox_id=inbox_id, run_id=inbox_id)
    with contextlib.suppress(Crash):
        await agent.respond("note: buy milk", first)
    assert await deps.db[collection].count_documents({}) == 1

    again = owner_ctx(deps, inbox_id=inbox_id, run_id=inbox_id, replay=True)
    reply = await agent.respond("note: buy milk", again)
    assert reply.text == "Saved your note."
    assert await deps.db[collection].count_documents({}) == 1  # not written twice
    results = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert results and "error" not in str(results[-1].parts[0])


async def test_a_different_call_at_the_same_place_still_runs(deps: AgentDeps) -> None:
    collection = f"ai_notes_{uuid.uuid4().hex[:8]}"
    texts = iter(["first", "second"])
    model = ScriptedModel(lambda r: "ok")
    agent = Agent(model, core_catalog())
    exchange = uuid.uuid4().hex
    for _ in range(2):
        note = next(texts)
        model.responder = _insert_then_answer(model, collection, note)
        await agent.respond("note", owner_ctx(deps, inbox_id=exchange, run_id=exchange))
    notes = sorted(d["note"] for d in await deps.db[collection].find({}).to_list())
    assert notes == ["first", "second"]


def _insert_then_answer(model: ScriptedModel, collection: str, note: str):  # type: ignore[no-untyped-def]
    def respond(request: Request) -> object:
        if any(m.role == "tool" for m in request.messages[-1:]):
            return "done"
        return model.call(
            "db_query", operation="insertOne", collection=collection, data={"note": note}
        )

    return respond


async def test_without_an_exchange_id_every_call_runs(deps: AgentDeps) -> None:
    """A context with no stable id (a test, a one-off) keeps nothing to replay."""
    collection = f"ai_notes_{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(lambda r: "ok")
    agent = Agent(model, core_catalog())
    for _ in range(2):
        model.responder = _insert_then_answer(model, collection, "same")
        await agent.respond("note", owner_ctx(deps))
    assert await deps.db[collection].count_documents({}) == 2
