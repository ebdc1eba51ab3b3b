"""Two tool calls with one id in a single model answer: the ids are made unique before
the history is stored, each result goes back under its own call's id, and the
conversation keeps working (the real APIs refuse a history with repeated ids).

Real adapters (OpenAI and Gemini SDKs) against fakes that check the history the way
the services do; the app is the real composition on the test database.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent.llm.gemini import CALL_ID_KEY, GeminiModel
from agent.llm.openai.model import OpenAIModel
from tests.databases import AppDb
from tests.fakes.chat_app import ChatApp, chat_app
from tests.fakes.strict_models import StrictGemini, StrictOpenAI

# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

Doc = dict[str, Any]


def _find(n: int) -> Doc:
    return {"operation": "find", "collection": "ai_items", "filter": {"n": n}}


@pytest.fixture
async def db_name(mongo_client: AsyncMongoClient[Doc]) -> AsyncIterator[str]:
    name = f"dupids_{uuid.uuid4().hex[:10]}"
    yield name
    await mongo_client.drop_database(name)


async def _seed(kit: ChatApp) -> None:
    await kit.app.deps.db["ai_items"].insert_many(
        [{"n": 1, "name": "one"}, {"n": 2, "name": "two"}]
    )


async def _stored_call_ids(kit: ChatApp) -> list[str]:
    ids: list[str] = []
    async for doc in kit.app.deps.db["messages"].find({"role": "assistant"}, sort=[("seq", 1)]):
        ids.extend(p["id"] for p in doc["parts"] if p["kind"] == "tool_call")
    return ids


async def test_openai_duplicate_call_ids_do_not_wedge_the_conversation(
    app_db: AppDb, db_name: str, tmp_path: Path
) -> None:
    async with StrictOpenAI() as fake:
        model = OpenAIModel("sk-test", "gpt-test", base_url=fake.base_url)
        fake.reply_calls_with_ids(
            ("call_0", "db_query", _find(1)), ("call_0", "db_query", _find(2))
        )
        fake.reply_text("Found one and two.")
        fake.reply_text("You're welcome.")
        fake.reply_calls_with_ids(("call_0", "db_query", _find(2)))  # the same id, a later turn
        fake.reply_text("Still two.")
        async with chat_app(app_db, db_name, model, tmp_path) as kit:
            await _seed(kit)
            assert await kit.ask("find items 1 and 2") == ["Found one and two."]
            # Each result went back under the id of the call that produced it.
            calls = fake.bodies[1]["messages"][-3]["tool_calls"]
            by_id = {c["id"]: c["function"]["arguments"] for c in calls}
            assert len(by_id) == 2 and "call_0" in by_id
            for call_id, result in fake.tool_results(1):
                [row] = result["rows"]
                assert f'"n": {row["n"]}' in by_id[call_id]
            assert await kit.ask("thanks") == ["You're welcome."]
            assert await kit.ask("and item 2 again?") == ["Still two."]
            ids = await _stored_call_ids(kit)
            assert len(ids) == 3 and len(set(ids)) == 3
            [row_doc] = [d for d in await kit.inbox() if d["text"] == "and item 2 again?"]
            assert row_doc["status"] == "done"
        await model.aclose()


async def test_gemini_duplicate_call_ids_do_not_wedge_the_conversation(
    app_db: AppDb, db_name: str, tmp_path: Path
) -> None:
    async with StrictGemini() as fake:
        model = GeminiModel("AIza-test", "gemini-test", base_url=fake.base_url)
        fake.reply_calls_with_ids(("fc-1", "db_query", _find(1)), ("fc-1", "db_query", _find(2)))
        fake.reply_text("Found one and two.")
        fake.reply_text("You're welcome.")
        async with chat_app(app_db, db_name, model, tmp_path) as kit:
            await _seed(kit)
            assert await kit.ask("find items 1 and 2") == ["Found one and two."]
            contents = fake.bodies[1]["contents"]
            calls = [p["functionCall"] for p in contents[-2]["parts"]]
            responses = fake.function_responses(1)
            assert len({c["id"] for c in calls}) == 2 and calls[0]["id"] == "fc-1"
            args_by_id = {c["id"]: c["args"] for c in calls}
            for response in responses:
                [row] = response["response"]["rows"]
                assert args_by_id[response["id"]]["filter"] == {"n": row["n"]}
            assert await kit.ask("thanks") == ["You're welcome."]
            ids = await _stored_call_ids(kit)
            assert len(ids) == 2 and len(set(ids)) == 2
            stored = [
                p
                async for d in kit.app.deps.db["messages"].find({"role": "assistant"})
                for p in d["parts"]
                if p["kind"] == "tool_call"
            ]
            assert [p["provider_data"][CALL_ID_KEY] for p in stored] == ids
        await model.aclose()
