"""Provider adapters through the real SDKs against local fakes of the HTTP APIs.

Every test drives the adapters the way the agent does (``run_loop`` with a small
toolset) and then reads what reached the fake, so the wire shapes are checked
as well as the behaviour.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from agent.config import ConfigError
from agent.context import AgentDeps, RunContext
from agent.conversation.loop import LoopResult, run_loop
from agent.llm import textcalls
from agent.llm.base import ModelClient, ModelError
from agent.llm.factory import NO_MODEL, build_model
from agent.llm.gemini_model import (
    CALL_ID_KEY,
    SIGNATURE_KEY,
    SKIP_SIGNATURE,
    GeminiModel,
    to_contents,
)
from agent.llm.openai_model import RAW_ARGUMENTS_KEY, OpenAIModel
from agent.llm.resilient import ResilientModel
from agent.llm.types import (
    MessagesAdapter,
    ModelMessage,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    user_message,
)
from agent.tools.base import Tool, Toolset
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest

# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

OPENAI_KEY = "sk-test-openai-3f9a1c"
GEMINI_KEY = "AIza-test-gemini-77e2b0"
SYSTEM = "You are a test assistant."


# -- a tiny toolset ------------------------------------------------------------
class CityArgs(BaseModel):
    city: str


class NoArgs(BaseModel):
    pass


@dataclass
class Kit:
    tools: Toolset
    ran: list[str] = field(default_factory=list)


def make_kit() -> Kit:
    ran: list[str] = []

    async def weather(args: CityArgs, ctx: RunContext) -> dict[str, Any]:
        ran.append(f"weather:{args.city}")
        return {"city": args.city, "celsius": 21}

    async def numbers(args: NoArgs, ctx: RunContext) -> dict[str, Any]:
        ran.append("numbers")
        return {"data": [1, 2, 3]}

    tools = Toolset(
        [
            Tool("get_weather", "Current weather in a city.", CityArgs, weather, writes=False),
            Tool("list_numbers", "Some numbers.", NoArgs, numbers, writes=False),
        ]
    )
    return Kit(tools=tools, ran=ran)


# -- one harness per provider, so behaviour tests run on both ----------------
@dataclass
class Harness:
    model: ModelClient
    calls: Callable[..., None]
    text: Callable[[str], None]
    results: Callable[[int], list[dict[str, Any]]]
    fake: FakeOpenAI | FakeGemini


def openai_harness(fake: FakeOpenAI) -> Harness:
    return Harness(
        model=OpenAIModel(OPENAI_KEY, "gpt-test", base_url=fake.base_url),
        calls=fake.reply_tool_calls,
        text=fake.reply_text,
        results=lambda i: [r for _, r in fake.tool_results(i)],
        fake=fake,
    )


def gemini_harness(fake: FakeGemini) -> Harness:
    return Harness(
        model=GeminiModel(GEMINI_KEY, "gemini-test", base_url=fake.base_url),
        calls=fake.reply_calls,
        text=lambda t: fake.reply_text(t),
        results=lambda i: [r["response"] for r in fake.function_responses(i)],
        fake=fake,
    )


@pytest.fixture(params=["openai", "gemini"])
async def harness(
    request: pytest.FixtureRequest, openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> AsyncIterator[Harness]:
    h = openai_harness(openai_api) if request.param == "openai" else gemini_harness(gemini_api)
    yield h
    await h.model.aclose()


@dataclass
class Sleeps:
    """An injected ``sleep`` that records the waits instead of waiting."""

    waits: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def run(
    model: ModelClient, kit: Kit, deps: AgentDeps, text: str = "Weather in Oslo?"
) -> LoopResult:
    return await run_loop(model, SYSTEM, [user_message(text)], kit.tools, owner_ctx(deps))


# -- round trips ---------------------------------------------------------------
async def test_tool_round_trip_both_providers(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.text("It is 21 °C in Oslo.")
    result = await run(harness.model, kit, deps)
    assert result.text == "It is 21 °C in Oslo."
    assert kit.ran == ["weather:Oslo"]
    assert result.turns == 2 and not result.exhausted
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert len(harness.fake.requests) == 2
    assert harness.results(1) == [{"city": "Oslo", "celsius": 21}]


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


async def test_gemini_wire_shape(gemini_api: FakeGemini, deps: AgentDeps) -> None:
    kit = make_kit()
    gemini_api.reply_calls(("get_weather", {"city": "Oslo"}))
    gemini_api.reply_text("Done.")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    result = await run(model, kit, deps)
    await model.aclose()
    assert result.model == "gemini-fake-001"
    first, second = gemini_api.requests
    assert first.path.endswith("/models/gemini-test:generateContent")
    assert first.headers["x-goog-api-key"] == GEMINI_KEY
    assert first.body["systemInstruction"]["parts"] == [{"text": SYSTEM}]
    decl = first.body["tools"][0]["functionDeclarations"][0]
    assert decl["name"] == "get_weather"
    assert decl["parameters_json_schema"]["required"] == ["city"]
    user, model_turn, results = second.body["contents"]
    assert user == {"role": "user", "parts": [{"text": "Weather in Oslo?"}]}
    assert model_turn["role"] == "model"
    call = model_turn["parts"][0]["functionCall"]
    # Gemini gave no id: we made one up for our history but never send it.
    assert call == {"name": "get_weather", "args": {"city": "Oslo"}}
    assert results["role"] == "user"
    assert results["parts"][0]["functionResponse"] == {
        "name": "get_weather",
        "response": {"city": "Oslo", "celsius": 21},
    }


async def test_gemini_call_ids_are_echoed(gemini_api: FakeGemini, deps: AgentDeps) -> None:
    kit = make_kit()
    gemini_api.reply_calls(("get_weather", {"city": "Oslo"}), ids=True)
    gemini_api.reply_text("Done.")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    result = await run(model, kit, deps)
    await model.aclose()
    call = result.messages[0].tool_calls[0]
    assert call.provider_data == {CALL_ID_KEY: call.id}
    sent_call = gemini_api.bodies[1]["contents"][1]["parts"][0]["functionCall"]
    assert sent_call["id"] == call.id
    assert gemini_api.function_responses(1)[0]["id"] == call.id


async def test_two_tool_calls_in_one_turn(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}))
    harness.text("Oslo 21, Rome 21.")
    result = await run(harness.model, kit, deps)
    assert result.text == "Oslo 21, Rome 21."
    assert kit.ran == ["weather:Oslo", "weather:Rome"]
    assert [c.name for c in result.messages[0].tool_calls] == ["get_weather", "get_weather"]
    assert len({c.id for c in result.messages[0].tool_calls}) == 2
    assert harness.results(1) == [
        {"city": "Oslo", "celsius": 21},
        {"city": "Rome", "celsius": 21},
    ]


async def test_duplicate_call_runs_once(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.text("21 in Oslo.")
    result = await run(harness.model, kit, deps)
    assert result.text == "21 in Oslo."
    assert kit.ran == ["weather:Oslo"]
    second_result = harness.results(2)[-1]
    assert "duplicate call" in second_result["error"]
    assert "earlier result" in second_result["error"]


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


# -- retries and fallback --------------------------------------------------------
async def test_503_retries_then_falls_back_to_gemini(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    no_sleep = Sleeps()
    openai_api.reply_error(503, "overloaded", type_="server_error", always=True)
    gemini_api.reply_text("Hello from Gemini.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        retries=3,
        sleep=no_sleep,
        jitter=lambda: 1.0,
    )
    result = await run(model, make_kit(), deps, "hi")
    await model.aclose()
    assert result.text == "Hello from Gemini."
    assert len(openai_api.requests) == 4  # first try + 3 retries
    assert len(gemini_api.requests) == 1
    assert no_sleep.waits == [0.5, 1.0, 2.0]


async def test_429_then_success_stays_on_primary(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    no_sleep = Sleeps()
    openai_api.reply_error(429, "Rate limit reached", type_="requests", code="rate_limit_exceeded")
    openai_api.reply_text("Hello again.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        sleep=no_sleep,
    )
    result = await run(model, make_kit(), deps, "hi")
    await model.aclose()
    assert result.text == "Hello again."
    assert len(openai_api.requests) == 2 and len(gemini_api.requests) == 0
    assert len(no_sleep.waits) == 1 and 0.25 <= no_sleep.waits[0] <= 0.5


async def test_non_retryable_error_skips_retries_but_falls_back(
    openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> None:
    no_sleep = Sleeps()
    gemini_api.reply_error(403, "permission denied", always=True)
    openai_api.reply_error(401, "bad key", type_="invalid_request_error", always=True)
    model = ResilientModel(
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        sleep=no_sleep,
    )
    with pytest.raises(ModelError) as info:
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert info.value.status == 401 and not info.value.retryable
    assert len(gemini_api.requests) == 1 and len(openai_api.requests) == 1
    assert no_sleep.waits == []


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (404, False)]
)
async def test_gemini_error_mapping(gemini_api: FakeGemini, status: int, retryable: bool) -> None:
    gemini_api.reply_error(status, "boom")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    with pytest.raises(ModelError) as info:
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert info.value.status == status and info.value.retryable is retryable
    assert len(gemini_api.requests) == 1  # the SDK itself never retries


async def test_timeouts_are_retryable(openai_api: FakeOpenAI, gemini_api: FakeGemini) -> None:
    openai_api.hang(2.0)
    gemini_api.hang(2.0)
    models: list[ModelClient] = [
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url, timeout=0.2),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url, timeout=0.2),
    ]
    for model in models:
        with pytest.raises(ModelError) as info:
            await model.request(SYSTEM, [user_message("hi")], [])
        assert info.value.retryable, model.name
        await model.aclose()


async def test_api_key_never_logged(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    openai_api.reply_error(401, f"Incorrect API key provided: {OPENAI_KEY}", always=True)
    gemini_api.reply_error(400, f"API key not valid: {GEMINI_KEY}", always=True)
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        sleep=Sleeps(),
    )
    with pytest.raises(ModelError) as info:
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert OPENAI_KEY not in str(info.value) and GEMINI_KEY not in str(info.value)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("openai" in r.getMessage() and "401" in r.getMessage() for r in warnings)
    assert any("gemini" in r.getMessage() and "400" in r.getMessage() for r in warnings)
    assert OPENAI_KEY not in caplog.text and GEMINI_KEY not in caplog.text


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


# -- turn cap ----------------------------------------------------------------------
async def test_turn_cap_gives_honest_reply(openai_api: FakeOpenAI, deps: AgentDeps) -> None:
    kit = make_kit()
    for n in range(20):
        openai_api.reply_tool_calls(("get_weather", {"city": f"City{n}"}))
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    result = await run(model, kit, deps)
    await model.aclose()
    assert len(openai_api.requests) == 8
    assert len(kit.ran) == 8
    assert result.exhausted and result.turns == 8
    assert "ran out of steps" in result.text


# -- Gemini specifics ----------------------------------------------------------------
async def test_gemini_thought_signature_survives_storage_and_is_echoed(
    gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    signature = b"\x00opaque-signature\xff\xfe"
    text_signature = b"text-sig-01"
    gemini_api.reply_calls(
        ("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}), signature=signature
    )
    gemini_api.reply_text("Oslo and Rome: 21.", signature=text_signature)
    gemini_api.reply_text("Anything else?")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    kit = make_kit()
    first = await run(model, kit, deps)
    stored_call = first.messages[0].tool_calls[0]
    assert stored_call.provider_data == {SIGNATURE_KEY: base64.b64encode(signature).decode("ascii")}

    # Store the exchange in MongoDB as JSON, read it back, and continue from it.
    history = [user_message("Weather in Oslo?"), *first.messages]
    await deps.db["llm_test"].insert_one(
        {"_id": "h", "messages": MessagesAdapter.dump_python(history, mode="json")}
    )
    doc = await deps.db["llm_test"].find_one({"_id": "h"})
    assert doc is not None
    restored = MessagesAdapter.validate_python(doc["messages"])
    await run_loop(
        model,
        SYSTEM,
        [*restored, user_message("thanks")],
        kit.tools,
        owner_ctx(deps),
    )
    await model.aclose()

    def sent_signature(body: dict[str, Any], content: int) -> list[bytes | None]:
        parts = body["contents"][content]["parts"]
        return [
            base64.urlsafe_b64decode(p["thoughtSignature"]) if "thoughtSignature" in p else None
            for p in parts
        ]

    # Turn 2 of the first exchange echoes the call signature on the first call only.
    assert sent_signature(gemini_api.bodies[1], 1) == [signature, None]
    # The later exchange, from stored history, echoes both signatures unchanged.
    third = gemini_api.bodies[2]
    assert sent_signature(third, 1) == [signature, None]
    assert sent_signature(third, 3) == [text_signature]
    assert third["contents"][3]["parts"][0]["text"] == "Oslo and Rome: 21."


async def test_gemini_function_response_is_an_object(
    gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    gemini_api.reply_calls(("list_numbers", {}))
    gemini_api.reply_text("1, 2, 3")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    result = await run(model, make_kit(), deps, "numbers?")
    await model.aclose()
    assert result.text == "1, 2, 3"
    [response] = gemini_api.function_responses(1)
    assert response["name"] == "list_numbers"
    assert response["response"] == {"data": [1, 2, 3]}
    # A non-object result that slipped past validation is wrapped the same way.
    odd = ToolResultPart.model_construct(call_id="c1", name="x", result=[1, 2])
    [content] = to_contents([ModelMessage(role="tool", parts=[odd])])
    assert content.parts is not None and content.parts[0].function_response is not None
    assert content.parts[0].function_response.response == {"data": [1, 2]}


async def test_gemini_blocked_answer_is_a_model_error(gemini_api: FakeGemini) -> None:
    gemini_api.reply_parts([], finish="SAFETY")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    with pytest.raises(ModelError) as info:
        await model.request(
            SYSTEM,
            [user_message("hi")],
            [ToolSpec(name="t", description="d", parameters={"type": "object"})],
        )
    await model.aclose()
    assert "SAFETY" in str(info.value) and not info.value.retryable


# -- factory -------------------------------------------------------------------------
async def test_build_model_requires_a_key() -> None:
    with pytest.raises(ConfigError, match=NO_MODEL):
        build_model(make_settings())
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_model(make_settings(llm_provider="openai", gemini_api_key="g"))
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        build_model(make_settings(openai_api_key="o", llm_fallback="gemini"))


async def test_build_model_picks_provider_and_fallback() -> None:
    only_gemini = build_model(make_settings(gemini_api_key="g"))
    assert isinstance(only_gemini, ResilientModel)
    assert isinstance(only_gemini.primary, GeminiModel) and only_gemini.fallback is None
    await only_gemini.aclose()

    both = build_model(
        make_settings(
            gemini_api_key="g", openai_api_key="o", llm_provider="openai", llm_fallback="gemini"
        )
    )
    assert isinstance(both, ResilientModel) and both.name == "openai"
    assert isinstance(both.primary, OpenAIModel) and isinstance(both.fallback, GeminiModel)
    await both.aclose()

    local = build_model(
        make_settings(llm_provider="openai", openai_base_url="http://127.0.0.1:1/v1")
    )
    assert isinstance(local, ResilientModel) and isinstance(local.primary, OpenAIModel)
    await local.aclose()


async def test_fallback_mid_exchange_signs_foreign_calls_for_gemini(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    """OpenAI calls a tool, then fails; Gemini 3 continues from OpenAI's unsigned call."""
    openai_api.reply_tool_calls(("get_weather", {"city": "Oslo"}))
    openai_api.reply_error(503, "overloaded", type_="server_error", always=True)
    gemini_api.reply_text("21 in Oslo.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-3-flash", base_url=gemini_api.base_url),
        retries=0,
        sleep=Sleeps(),
    )
    kit = make_kit()
    result = await run(model, kit, deps)
    await model.aclose()
    assert result.text == "21 in Oslo." and kit.ran == ["weather:Oslo"]
    call_part = gemini_api.bodies[0]["contents"][1]["parts"][0]
    assert call_part["functionCall"] == {"name": "get_weather", "args": {"city": "Oslo"}}
    assert call_part["thoughtSignature"] == "skip_thought_signature_validator"
    assert gemini_api.function_responses(0)[0]["response"] == {"city": "Oslo", "celsius": 21}


def test_gemini_stand_in_signature_only_in_current_turn_of_new_models() -> None:
    old_call = ModelMessage(
        role="assistant", parts=[ToolCallPart(id="a", name="get_weather", arguments={})]
    )
    new_call = ModelMessage(
        role="assistant",
        parts=[
            ToolCallPart(id="b", name="get_weather", arguments={"city": "X"}),
            ToolCallPart(id="c", name="get_weather", arguments={"city": "Y"}),
        ],
    )
    history = [user_message("one"), old_call, user_message("two"), new_call]
    signed = to_contents(history, sign_unsigned=True)
    assert [p.thought_signature for p in signed[1].parts or []] == [None]
    assert [p.thought_signature for p in signed[3].parts or []] == [SKIP_SIGNATURE, None]
    plain = to_contents(history, sign_unsigned=False)
    assert all(p.thought_signature is None for c in plain for p in c.parts or [])


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
