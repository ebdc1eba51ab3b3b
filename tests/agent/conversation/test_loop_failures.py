"""Nothing escapes the loop: an unreadable model answer or unusable tool arguments end
in an apology (or a tool error the model reads), never a silent, re-billed message.

The adapters are the real ones (OpenAI and Gemini SDKs) against local fakes of the
APIs; the app is the real composition on the test database.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from tests.databases import AppDb
from tests.fakes.chat_app import ChatApp, chat_app
from tests.fakes.scripted_server import Answer
from tests.fakes.strict_models import StrictGemini, StrictOpenAI

# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

Doc = dict[str, Any]
RAW_EXCEPTION_WORDS = ("Error", "Traceback", "Expecting value", "recursion", "object has no")


def _deep(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def _deep_find(levels: int) -> str:
    """db_query arguments whose filter is nested ``levels`` deep, as the model wrote them."""
    return '{"operation": "find", "collection": "ai_notes", "filter": ' + _deep(levels) + "}"


@pytest.fixture
async def db_name(mongo_client: AsyncMongoClient[Doc]) -> AsyncIterator[str]:
    name = f"loopfail_{uuid.uuid4().hex[:10]}"
    yield name
    await mongo_client.drop_database(name)


@pytest.fixture
async def openai_fake() -> AsyncIterator[StrictOpenAI]:
    async with StrictOpenAI() as fake:
        yield fake


@pytest.fixture
async def gemini_fake() -> AsyncIterator[StrictGemini]:
    async with StrictGemini() as fake:
        yield fake


@pytest.fixture
async def openai_model(openai_fake: StrictOpenAI) -> AsyncIterator[OpenAIModel]:
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_fake.base_url)
    yield model
    await model.aclose()


@pytest.fixture
async def gemini_model(gemini_fake: StrictGemini) -> AsyncIterator[GeminiModel]:
    model = GeminiModel("AIza-test", "gemini-test", base_url=gemini_fake.base_url)
    yield model
    await model.aclose()


def _assert_apology(replies: list[str]) -> None:
    assert len(replies) == 1 and replies[0].startswith("Sorry"), replies
    assert not any(word in replies[0] for word in RAW_EXCEPTION_WORDS), replies[0]


async def _assert_failed_and_not_rebilled(
    kit: ChatApp, app_db: AppDb, db_name: str, tmp_path: Path, model: Any, fake: Any
) -> None:
    [row] = await kit.inbox()
    assert row["status"] == "failed" and row.get("error"), row
    asked = len(fake.requests)
    async with chat_app(app_db, db_name, model, tmp_path) as again:  # a restart
        assert await again.app.pipeline.recover(sole_owner=True) == 0
        await again.app.pipeline.join()
        assert again.chat.sent == []
    assert len(fake.requests) == asked


async def test_an_html_page_with_status_200_gets_an_apology_and_fails_once(
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    openai_fake: StrictOpenAI,
    openai_model: OpenAIModel,
) -> None:
    model = openai_model
    openai_fake.raw()  # text/html: the SDK hands back a string, not a completion
    async with chat_app(app_db, db_name, model, tmp_path) as kit:
        _assert_apology(await kit.ask("what is on today?"))
        await _assert_failed_and_not_rebilled(kit, app_db, db_name, tmp_path, model, openai_fake)
        # The conversation is not wedged: the next message is answered.
        openai_fake.reply_text("Nothing today.")
        assert await kit.ask("and now?") == ["Nothing today."]


async def test_html_labelled_as_json_gets_an_apology(
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    openai_fake: StrictOpenAI,
    openai_model: OpenAIModel,
) -> None:
    model = openai_model
    openai_fake.raw(content_type="application/json")  # the SDK's json() raises
    async with chat_app(app_db, db_name, model, tmp_path) as kit:
        _assert_apology(await kit.ask("hello?"))
        [row] = await kit.inbox()
        assert row["status"] == "failed"


async def test_arguments_nested_thousands_deep_then_html_apologise_and_fail_once(
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    openai_fake: StrictOpenAI,
    openai_model: OpenAIModel,
) -> None:
    model = openai_model
    openai_fake.reply_tool_calls(("db_query", _deep_find(5000)))
    openai_fake.raw()
    async with chat_app(app_db, db_name, model, tmp_path) as kit:
        _assert_apology(await kit.ask("find my notes"))
        [(_, result)] = openai_fake.tool_results(1)
        assert "nested" in result["error"]  # the model was told why, as a tool error
        await _assert_failed_and_not_rebilled(kit, app_db, db_name, tmp_path, model, openai_fake)


@pytest.mark.parametrize("levels", [80, 5000])
async def test_arguments_nested_too_deep_are_a_tool_error_the_model_reads(
    levels: int,
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    openai_fake: StrictOpenAI,
    openai_model: OpenAIModel,
) -> None:
    model = openai_model
    openai_fake.reply_tool_calls(("db_query", _deep_find(levels)))
    openai_fake.reply_text("That filter was too deep; I'll keep it simpler.")
    async with chat_app(app_db, db_name, model, tmp_path) as kit:
        replies = await kit.ask("find my notes")
        assert replies == ["That filter was too deep; I'll keep it simpler."]
        [(_, result)] = openai_fake.tool_results(1)
        assert "nested" in result["error"]
        [row] = await kit.inbox()
        assert row["status"] == "done"
        stored = [json.dumps(d, default=str) async for d in kit.app.deps.db["messages"].find()]
        assert len(stored) == 4  # user, the call, its error, the answer


async def test_gemini_arguments_nested_thousands_deep_apologise_and_fail_once(
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    gemini_fake: StrictGemini,
    gemini_model: GeminiModel,
) -> None:
    model = gemini_model
    body = gemini_fake.answer_body([{"functionCall": {"name": "db_query", "args": "@"}}])
    text = json.dumps(body).replace('"@"', _deep(5000))  # the SDK's JSON parser recurses
    gemini_fake.push(Answer(200, text))
    async with chat_app(app_db, db_name, model, tmp_path) as kit:
        _assert_apology(await kit.ask("find my notes"))
        await _assert_failed_and_not_rebilled(kit, app_db, db_name, tmp_path, model, gemini_fake)
