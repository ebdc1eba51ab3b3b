"""What an OpenAI-compatible server answers, read through the real SDK from its JSON
(``agent.llm.openai.wire``): the usual shape, the variants compatible servers send,
and answers that are no chat completion at all, each a clear ``ModelError``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.llm.base import ModelError
from agent.llm.openai.model import OpenAIModel
from agent.llm.types import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolSpec
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

__all__ = ["openai_api"]  # a fixture, imported for pytest

TOOL = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HELLO = [ModelMessage(role="user", parts=[TextPart(text="hello")])]


@pytest.fixture
async def model(openai_api: FakeOpenAI) -> AsyncIterator[OpenAIModel]:
    client = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    yield client
    await client.aclose()


async def ask(model: OpenAIModel, openai_api: FakeOpenAI, body: Any) -> ModelResponse:
    openai_api.push(Answer(200, body))
    return await model.request("Be brief.", HELLO, [TOOL])


def texts(response: ModelResponse) -> list[str]:
    return [p.text for p in response.message.parts if isinstance(p, TextPart)]


def calls(response: ModelResponse) -> list[ToolCallPart]:
    return [p for p in response.message.parts if isinstance(p, ToolCallPart)]


async def test_the_usual_answer_gives_its_text_calls_usage_and_model(
    model: OpenAIModel, openai_api: FakeOpenAI
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    body = openai_api.completion("Let me look.", [call], usage=(120, 9))
    response = await ask(model, openai_api, body)
    assert texts(response) == ["Let me look."]
    [part] = calls(response)
    assert (part.id, part.name, part.arguments) == ("call_1", "get_weather", {"city": "Oslo"})
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 9)
    assert response.model == "gpt-fake"


async def test_variants_of_compatible_servers_are_read(
    model: OpenAIModel, openai_api: FakeOpenAI
) -> None:
    """Text as a list of parts; arguments as an object; a call without ``type``; usage
    and model of the wrong type (counted as absent)."""
    body = openai_api.completion(None)
    message = body["choices"][0]["message"]
    message["content"] = [{"type": "text", "text": "Sunny "}, {"type": "text", "text": "today."}]
    message["tool_calls"] = [
        {"id": "c9", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
        {"id": "c10", "type": "function", "function": {"arguments": "{}"}},  # no name
        "not a call",
    ]
    body["usage"] = {"prompt_tokens": "many", "completion_tokens": True}
    body["model"] = 7
    response = await ask(model, openai_api, body)
    assert texts(response) == ["Sunny today."]
    assert [(c.id, c.name, c.arguments) for c in calls(response)] == [
        ("c9", "get_weather", {"city": "Rome"})
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)
    assert response.model == ""


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([{"choices": []}], "not a chat completion (list"),
        ("<html>502 Bad Gateway</html>", "not a chat completion (str"),
        ({"object": "chat.completion"}, "answer without choices"),
        ({"choices": "none"}, "answer without choices"),
    ],
)
async def test_an_answer_that_is_no_chat_completion_is_a_clear_retryable_error(
    model: OpenAIModel, openai_api: FakeOpenAI, body: Any, says: str
) -> None:
    with pytest.raises(ModelError) as caught:
        await ask(model, openai_api, body)
    assert says in str(caught.value) and caught.value.retryable


async def test_a_choice_that_is_no_object_is_an_empty_answer_not_a_crash(
    model: OpenAIModel, openai_api: FakeOpenAI
) -> None:
    response = await ask(model, openai_api, {"choices": [None], "model": "m"})
    assert response.message.parts == [] and response.model == "m"
