"""The Gemini adapter through the real SDK against a local fake of the HTTP API:
the wire shape, call ids, errors, thought signatures and function responses."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agent.context import AgentDeps
from agent.conversation.loop import run_loop
from agent.llm.base import ModelError
from agent.llm.gemini import (
    CALL_ID_KEY,
    SIGNATURE_KEY,
    SKIP_SIGNATURE,
    GeminiModel,
    to_contents,
)
from agent.llm.types import (
    MessagesAdapter,
    ModelMessage,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    user_message,
)
from tests.agent.llm.llm_kit import GEMINI_KEY, SYSTEM, make_kit, run
from tests.contexts import owner_ctx
from tests.fakes.fixtures import gemini_api
from tests.fakes.gemini_api import FakeGemini

__all__ = ["gemini_api"]  # a fixture, imported for pytest


# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


# -- wire shape -----------------------------------------------------------------
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
