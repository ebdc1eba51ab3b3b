"""Request bodies encoded with each tool's schema encoded once: the same bytes as the
whole body encoded at once, as the SDK encodes a body (UTF-8, no spaces)."""

from __future__ import annotations

import json
from typing import Any

from agent.llm.openai.wire import RequestBodies
from agent.llm.types import ToolSpec

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Stadt, z. B. Zürich"}},
    "required": ["city"],
}
MESSAGES = [
    {"role": "system", "content": "Be brief. ✓"},
    {"role": "user", "content": "Wetter in Zürich? \U0001f326"},
]


def weather(schema: dict[str, Any] = SCHEMA, description: str = "Weather now.") -> ToolSpec:
    return ToolSpec(name="get_weather", description=description, parameters=schema)


def whole_body(model: str, messages: list[dict[str, Any]], tools: list[ToolSpec]) -> bytes:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in tools
        ]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_the_bytes_are_the_whole_body_encoded_at_once() -> None:
    bodies = RequestBodies()
    other = ToolSpec(name="noop", description="", parameters={"type": "object"})
    for tools in ([weather(), other], [], [other]):
        assert bodies.encode("gpt-x", MESSAGES, tools) == whole_body("gpt-x", MESSAGES, tools)
    encoded = bodies.encode("gpt-x", MESSAGES, [weather()])
    assert "Zürich".encode() in encoded  # UTF-8, not \\u escapes
    assert json.loads(encoded)["tools"][0]["function"]["parameters"] == SCHEMA


def test_a_tool_is_encoded_once_while_its_schema_stays() -> None:
    bodies = RequestBodies()
    for _ in range(5):
        bodies.encode("m", MESSAGES, [weather()])  # a new ToolSpec (and schema copy) each time
    assert len(bodies) == 1
    changed = {**SCHEMA, "required": []}  # the same name and description, another schema
    encoded = bodies.encode("m", MESSAGES, [weather(changed)])
    assert json.loads(encoded)["tools"][0]["function"]["parameters"]["required"] == []
    described = json.loads(bodies.encode("m", MESSAGES, [weather(description="Rain?")]))
    assert described["tools"][0]["function"]["description"] == "Rain?"
    assert len(bodies) == 2


def test_a_schema_changed_in_place_is_encoded_again() -> None:
    bodies = RequestBodies()
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    spec = ToolSpec.model_construct(name="t", description="", parameters=schema)
    bodies.encode("m", MESSAGES, [spec])
    schema["properties"]["a"]["type"] = "integer"  # the kept copy is not this object
    sent = json.loads(bodies.encode("m", MESSAGES, [spec]))["tools"][0]["function"]
    assert sent["parameters"]["properties"]["a"]["type"] == "integer"


def test_the_kept_encodings_are_bounded() -> None:
    bodies = RequestBodies(keep=4)
    for n in range(10):
        spec = ToolSpec(name=f"tool_{n}", description="", parameters=SCHEMA)
        sent = json.loads(bodies.encode("m", MESSAGES, [spec]))["tools"][0]["function"]
        assert sent["name"] == f"tool_{n}"
    assert len(bodies) == 4


def test_a_lone_surrogate_goes_escaped_instead_of_failing_the_turn() -> None:
    bodies = RequestBodies()
    messages = [{"role": "tool", "tool_call_id": "c1", "content": "half a pair: \ud83d, é"}]
    encoded = bodies.encode("m", messages, [weather()])
    assert b"\\ud83d" in encoded and "é".encode() not in encoded  # ASCII escapes throughout
    assert json.loads(encoded)["messages"][0]["content"] == "half a pair: \ud83d, é"
    assert json.loads(encoded)["tools"][0]["function"]["name"] == "get_weather"
