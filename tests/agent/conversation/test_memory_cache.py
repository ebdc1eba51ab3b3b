"""Saving a fact does not change the start of the next request: two consecutive
requests, read off the fake OpenAI server as the real SDK sent them, share their
system prompt and tools, and the fact rides in the note after the question."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from agent.llm.openai.model import OpenAIModel
from tests.agent.conversation.test_prompt_cache import owner_chat
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["openai_api"]  # a fixture, imported for pytest
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


async def test_a_saved_fact_leaves_the_start_of_the_next_request_as_it_was(
    app_db: AppDb, tmp_path: Path, openai_api: FakeOpenAI
) -> None:
    clock = FakeClock(datetime(2026, 11, 27, 13, 44, tzinfo=BERLIN))
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    openai_api.reply_tool_calls(("save_memory", {"memory": "The owner's landlord is Mrs Okafor"}))
    openai_api.reply_text("Noted.")
    openai_api.reply_text("Mrs Okafor.")
    async with owner_chat(app_db, tmp_path, model, clock) as (app, chat):
        await chat.say("remember that my landlord is Mrs Okafor")
        await app.pipeline.join()
        await chat.say("what's my landlord's name?")
        await app.pipeline.join()
    await model.aclose()
    before, saved, after = openai_api.bodies
    assert after["messages"][0] == before["messages"][0]  # the system prompt
    assert after["tools"] == before["tools"]
    assert "Okafor" not in after["messages"][0]["content"]
    # The history then goes on as it was sent: the first message and the save's call.
    first = after["messages"][1]["content"]
    assert (first if isinstance(first, str) else first[0]["text"]) == (
        "remember that my landlord is Mrs Okafor"
    )
    assert after["messages"][2:4] == saved["messages"][2:4]
    note = after["messages"][-1]["content"][-1]["text"]
    assert "m1" in note and "The owner's landlord is Mrs Okafor" in note
