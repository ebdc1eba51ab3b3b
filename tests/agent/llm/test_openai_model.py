"""The OpenAI adapter through the real SDK against a local fake of the HTTP API:
the wire shape, malformed arguments, and text tool calls for servers without tools."""

from __future__ import annotations

import json

import pytest

from agent.context import AgentDeps
from agent.llm import textcalls
from agent.llm.base import ModelError
from agent.llm.openai.model import OpenAIModel
from agent.llm.openai.wire import RAW_ARGUMENTS_KEY
from tests.agent.llm.llm_kit import OPENAI_KEY, SYSTEM, make_kit, run
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

__all__ = ["openai_api"]  # a fixture, imported for pytest


# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


# -- wire shape -----------------------------------------------------------------
async def test_openai_wire_shape(openai_api: FakeOpenAI, deps: AgentDeps) -> None:
    kit = make_kit()
    openai_api.reply_tool_calls(("get_weather", {"city": "Oslo"}))
    openai_api.reply_text("Done.")
    # A bare host works too: the adapter adds the /v1 the SDK expects.
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.url)
    result = await run(model, kit, deps)
    await model.aclose()
    assert result.model == "gpt-fake"
    first, second = openai_api.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["Authorization"] == f"Bearer {OPENAI_KEY}"
    assert first.headers["Content-Type"] == "application/json"
    assert first.body["model"] == "gpt-test"
    assert first.body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert first.body["messages"][1] == {"role": "user", "content": "Weather in Oslo?"}
    tool = first.body["tools"][0]
    assert tool["type"] == "function" and tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"]["required"] == ["city"]
    assistant, tool_msg = second.body["messages"][2:]
    call = assistant["tool_calls"][0]
    assert assistant["role"] == "assistant"
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == call["id"]
    assert json.loads(tool_msg["content"]) == {"city": "Oslo", "celsius": 21}


async def test_openai_malformed_arguments_reach_the_tool_as_validation_error(
    openai_api: FakeOpenAI, deps: AgentDeps
) -> None:
    kit = make_kit()
    openai_api.reply_tool_calls(("get_weather", '{"city": "Oslo"'))
    openai_api.reply_text("Sorry.")
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    result = await run(model, kit, deps)
    await model.aclose()
    call = result.messages[0].tool_calls[0]
    assert call.arguments == {}
    assert call.provider_data == {RAW_ARGUMENTS_KEY: '{"city": "Oslo"'}
    assert kit.ran == []
    [(_, sent)] = openai_api.tool_results(1)
    assert "invalid arguments for get_weather" in sent["error"]


# -- text tool calls (servers without native tools) ---------------------------------
OLLAMA_NO_TOOLS = "registry.ollama.ai/library/gemma3:4b does not support tools"


async def test_400_no_tools_switches_to_text_mode(openai_api: FakeOpenAI, deps: AgentDeps) -> None:
    kit = make_kit()
    openai_api.reply_error(400, OLLAMA_NO_TOOLS, type_="api_error")
    openai_api.reply_text(
        'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
        '</tool_call>\n<tool_call>{"name": "list_numbers", "arguments": {}}</tool_call>'
    )
    openai_api.reply_text("21 °C in Oslo.")
    model = OpenAIModel(OPENAI_KEY, "gemma3:4b", base_url=openai_api.base_url)
    result = await run(model, kit, deps)
    assert result.text == "21 °C in Oslo."
    assert kit.ran == ["weather:Oslo", "numbers"]
    assert model.text_mode()
    native, text_first, text_second = openai_api.bodies
    assert "tools" in native
    assert "tools" not in text_first and "tools" not in text_second
    system = text_first["messages"][0]["content"]
    assert system.startswith(SYSTEM) and "<tool_call>" in system and "- get_weather:" in system
    replayed = text_second["messages"]
    assert [m["role"] for m in replayed] == ["system", "user", "assistant", "user"]
    assert replayed[2]["content"].startswith("Let me check.")
    assert '<tool_call>{"name": "get_weather"' in replayed[2]["content"]
    assert (
        '<tool_result name="get_weather">{"city": "Oslo", "celsius": 21}'
        in (replayed[3]["content"])
    )
    assert '<tool_result name="list_numbers">{"data": [1, 2, 3]}' in replayed[3]["content"]

    # Remembered for this model: the next exchange goes straight to text mode.
    openai_api.reply_text("Hi!")
    again = await run(model, kit, deps, "hello")
    await model.aclose()
    assert again.text == "Hi!"
    assert len(openai_api.requests) == 4 and "tools" not in openai_api.bodies[3]


async def test_context_length_400_does_not_switch_modes(
    openai_api: FakeOpenAI, deps: AgentDeps
) -> None:
    openai_api.reply_error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens (including 120 in the tools). Please reduce the length.",
        code="context_length_exceeded",
    )
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    with pytest.raises(ModelError) as info:
        await run(model, make_kit(), deps)
    await model.aclose()
    assert info.value.status == 400 and not info.value.retryable
    assert not model.text_mode()
    assert len(openai_api.requests) == 1


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (OLLAMA_NO_TOOLS, True),
        ('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser', True),
        ("Unrecognized request argument supplied: tools", True),
        ("Tools are not supported for this model", True),
        ("This model does not support function calling", True),
        ("maximum context length is 4096 tokens, tools included", False),
        ("Invalid 'tools[0].function.name': string does not match pattern", False),
        ("The model `gpt-nope` does not exist", False),
        ("'messages' must contain the word 'json'", False),
    ],
)
def test_tools_unsupported_detection(detail: str, expected: bool) -> None:
    assert textcalls.tools_unsupported(400, detail) is expected
    assert not textcalls.tools_unsupported(500, detail)


def test_parse_tool_calls_keeps_invalid_blocks_as_text() -> None:
    text = (
        'Sure. <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        '<tool_call>```json\n{"name": "b", "arguments": "{\\"y\\": 2}"}\n```</tool_call>'
    )
    rest, calls = textcalls.parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert rest == "Sure. <tool_call>{not json}</tool_call>"


async def test_vllm_style_error_body_switches_to_text_mode(
    openai_api: FakeOpenAI, deps: AgentDeps
) -> None:
    openai_api.push(
        Answer(
            400,
            {
                "object": "error",
                "message": '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        )
    )
    openai_api.reply_text("Hi there.")
    model = OpenAIModel(OPENAI_KEY, "qwen", base_url=openai_api.base_url)
    result = await run(model, make_kit(), deps, "hi")
    await model.aclose()
    assert result.text == "Hi there." and model.text_mode()
    assert "tools" not in openai_api.bodies[1]
