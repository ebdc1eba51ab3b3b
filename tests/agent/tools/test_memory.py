"""The memory tools through the agent, its real tools and the real database: a receipt
for every fact, corrections that stick, contradictions reported, recall of facts and
past messages, forgetting that reaches the history, and a restart."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from agent.context import AgentDeps, RunContext
from agent.conversation.agent import Agent
from agent.conversation.prompt import mark_untrusted
from agent.llm.types import ToolResultPart
from agent.tools.catalog import core_catalog
from storage.db import open_database
from storage.repos.memories import FactSource, MemoryStore
from tests.conftest import make_settings
from tests.contexts import agent_deps, owner_ctx
from tests.fakes.scripted import Request, ScriptedModel, sequence


def said(deps: AgentDeps, words: str, **fields: Any) -> tuple[str, RunContext]:
    """The owner's chat message ``words`` and its run, as the dispatcher makes it."""
    return words, owner_ctx(deps, owner_words=words, **fields)


def result_of(request: Request) -> dict[str, Any]:
    """The tool result the model reads in ``request`` (the last message's first part)."""
    part = request.messages[-1].parts[0]
    assert isinstance(part, ToolResultPart)
    return part.result


def everything(request: Request) -> str:
    """All a request carries: the system prompt, every message and the note."""
    texts = [request.system]
    for message in request.messages:
        texts.append(message.text + message.note)
        texts += [json.dumps(p.model_dump(), ensure_ascii=False) for p in message.parts]
    return "\n".join(texts)


async def call(deps: AgentDeps, words: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """The owner says ``words``; the model calls ``tool``; what it reads back."""
    model = ScriptedModel(lambda r: "ok")
    model.responder = sequence(model.call(tool, **arguments), "Done.")
    await Agent(model, core_catalog()).respond(*said(deps, words))
    return result_of(model.requests[1])


async def test_save_answers_with_a_receipt(deps: AgentDeps) -> None:
    receipt = await call(
        deps, "remember my landlord", "save_memory", memory="  My landlord is   Mrs Okafor. "
    )
    assert receipt == {"saved": True, "id": "m1", "text": "My landlord is Mrs Okafor."}
    [fact] = await MemoryStore(deps.db).all()
    assert (fact.id, fact.text, fact.source) == ("m1", "My landlord is Mrs Okafor.", FactSource())
    again = await call(deps, "again", "save_memory", memory="my landlord is Mrs Okafor")
    assert again["already_saved"] is True and again["id"] == "m1"
    assert len(await MemoryStore(deps.db).all()) == 1


async def test_a_contradiction_of_the_same_subject_is_reported(deps: AgentDeps) -> None:
    await call(deps, "x", "save_memory", memory="My landlord is Mrs Okafor")
    await call(deps, "x", "save_memory", memory="The dentist is Dr Patel")
    answer = await call(deps, "x", "save_memory", memory="My landlord is Mr Chen")
    assert answer["saved"] is True
    [related] = answer["related"]
    assert related["id"] == "m1" and related["text"] == "My landlord is Mrs Okafor"
    assert "contradict" in related["relation"]
    assert "forget_memory" in answer["note"]


async def test_a_corrected_fact_never_reaches_the_model_again(deps: AgentDeps) -> None:
    await call(deps, "my landlord is Mrs Okafor", "save_memory", memory="My landlord is Mrs Okafor")
    answer = await call(deps, "x", "save_memory", memory="My landlord is Mr Chen", replaces="m1")
    assert answer["replaced"] == "m1" and "related" not in answer
    model = ScriptedModel(lambda r: "ok")
    model.responder = sequence(model.call("search_memory", query="landlord"), "Mr Chen.")
    await Agent(model, core_catalog()).respond(*said(deps, "who is my landlord?"))
    first, second = model.requests
    assert "Mr Chen" in first.messages[-1].note  # rides with the question
    found = result_of(second)
    assert [f["text"] for f in found["facts"]] == ["My landlord is Mr Chen"]
    assert "Okafor" not in first.messages[-1].note + json.dumps(found)
    # Nor from history: the owner's words and the first receipt say where it went.
    assert "Okafor" not in everything(first) + everything(second)
    assert "[corrected: see m2]" in everything(first)


async def test_the_relevant_fact_rides_in_the_note_not_the_system_prompt(deps: AgentDeps) -> None:
    store = MemoryStore(deps.db)
    await store.add("The owner's gym locker code is 4471", FactSource(), deps.clock())
    await store.add("The owner's sister Anna lives in Hamburg", FactSource(), deps.clock())
    model = ScriptedModel(lambda r: "ok")
    await Agent(model, core_catalog()).respond(*said(deps, "what's my locker code?"))
    request = model.requests[0]
    assert "4471" in request.messages[-1].note and "m1" in request.messages[-1].note
    assert "Hamburg" not in request.messages[-1].note  # not about lockers
    assert "4471" not in request.system


async def test_search_finds_past_messages_with_their_date(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "Good to know.")
    agent = Agent(model, core_catalog())
    await agent.respond(*said(deps, "The plumber comes on Tuesday at nine"))
    await agent.respond(*said(deps, "thanks", conversation_key="telegram:42", channel="telegram"))
    found = await call(deps, "when does the plumber come?", "search_memory", query="plumber")
    [message] = found["messages"]
    assert message["who"] == "owner" and message["channel"] == "console"
    assert message["snippet"] == "The plumber comes on Tuesday at nine"
    assert message["date"] == deps.clock().astimezone(deps.owner.tz).strftime("%Y-%m-%d")
    nothing = await call(deps, "x", "search_memory", query="electrician")
    assert nothing["facts"] == nothing["messages"] == []
    assert "do not guess" in nothing["note"]


async def test_a_fact_from_outside_text_is_shown_as_such(deps: AgentDeps) -> None:
    source = FactSource(("web search results",), approved="4711")
    await MemoryStore(deps.db).add("The bakery opens at 7", source, deps.clock())
    found = await call(deps, "when does the bakery open?", "search_memory", query="bakery")
    [fact] = found["facts"]
    assert fact["text"].startswith(
        '<external_content from="a saved fact from web search results" trust="untrusted">'
    )
    assert fact["source"] == "outside text (web search results), approved 4711"


async def test_forget_with_history_leaves_nothing_in_later_requests(deps: AgentDeps) -> None:
    model = ScriptedModel(lambda r: "ok")
    agent = Agent(model, core_catalog())
    fact = "My landlord is Mrs Okafor, phone +44 20 7946 0000"
    model.responder = sequence(model.call("save_memory", memory=fact), "Saved Mrs Okafor.")
    await agent.respond(*said(deps, "My landlord is Mrs Okafor, her phone is +44 20 7946 0000"))
    await deps.db["runs"].insert_one({"kind": "cron", "result": "Rent paid to Mrs Okafor. Done."})
    model.responder = sequence("Mrs Okafor, +44 20 7946 0000.")
    await agent.respond(*said(deps, "what is the phone number of my landlord?"))
    assert "Okafor" in everything(model.requests[-1])  # remembered until forgotten
    model.responder = sequence(
        model.call("forget_memory", query="landlord", history=True), "Forgotten."
    )
    await agent.respond(*said(deps, "forget everything about my landlord"))
    answer = result_of(model.requests[-1])
    assert answer["removed"] == [{"id": "m1", "about": "landlord, mrs, phone"}]
    assert answer["history_redacted"]["messages"] >= 4  # both said it, and the calls
    assert "Okafor" not in json.dumps(answer) and "7946" not in json.dumps(answer)
    model.responder = sequence(model.call("search_memory", query="landlord phone"), "Nothing.")
    await agent.respond(*said(deps, "hi, who was my landlord?"))
    for request in model.requests[-2:]:
        carried = everything(request)
        assert "Okafor" not in carried and "7946" not in carried, carried
    run = await deps.db["runs"].find_one({"kind": "cron"})
    assert run is not None and run["result"] == "[forgotten at the owner's request] Done."
    assert await MemoryStore(deps.db).all() == []


async def test_facts_survive_a_restart_and_an_old_blob_becomes_facts(
    mongo_server: str, tmp_path: Path
) -> None:
    settings = make_settings(data_dir=tmp_path / "data", openai_api_key="k")
    uri, name = mongo_server + "?directConnection=true", f"mem_{uuid.uuid4().hex[:8]}"
    blob = "- Owner likes green tea\n\n## Family\n- Sister Anna lives in Hamburg. Born 1990."
    async with open_database(uri, name, settings.data_dir) as database:
        await database.db["settings"].insert_one(
            {"_id": "system_instruction", "memory": blob, "core_instruction": "Be kind."}
        )
    for _ in range(2):  # the second start finds nothing left to upgrade
        async with open_database(uri, name, settings.data_dir) as database:
            facts = await MemoryStore(database.db).all()
            assert [f.text for f in facts] == [
                "Owner likes green tea",
                "## Family",
                "Sister Anna lives in Hamburg. Born 1990.",
            ]
            stored = await database.db["settings"].find_one({"_id": "system_instruction"})
            assert stored is not None and stored["memory_before_facts"] == blob
            assert "memory" not in stored and stored["core_instruction"] == "Be kind."
    async with (
        open_database(uri, name, settings.data_dir) as database,
        aiohttp.ClientSession() as http,
    ):
        deps = agent_deps(settings, database.db, http)
        found = await call(deps, "where does Anna live?", "search_memory", query="Anna")
        assert [f["id"] for f in found["facts"]] == ["m3"]
        await database.client.drop_database(name)


async def test_db_query_cannot_write_facts(deps: AgentDeps) -> None:
    answer = await call(
        deps, "x", "db_query", operation="insertOne", collection="memories", data={"text": "x"}
    )
    assert "save_memory" in answer["error"] and "forget_memory" in answer["error"]
    assert await MemoryStore(deps.db).all() == []


async def test_a_contacts_conversation_is_never_recalled(deps: AgentDeps) -> None:
    """A contact's words (and the answers to them) are not the owner's past talk."""
    model = ScriptedModel(lambda r: "Thank you, I will pass it on.")
    contact = owner_ctx(
        deps, tier="contact", channel="whatsapp", conversation_key="whatsapp:+15550100999"
    )
    words = mark_untrusted("the plumber invoice is 900 EUR", "+15550100999")  # as dispatched
    await Agent(model, core_catalog()).respond(words, contact)
    found = await call(deps, "what about the plumber?", "search_memory", query="plumber pass")
    assert found["messages"] == []
