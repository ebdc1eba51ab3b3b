"""An integer BSON cannot hold (beyond int64) in a tool call's arguments is a tool error
the model can fix, never a failed turn: the exchange is stored, an SMS sent in the same
turn stays part of the answer, and the message ends as done."""

from __future__ import annotations

from typing import Any

from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.llm.types import ModelMessage, ToolCallPart
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.fakes.scripted import Request

HUGE = 123456789012345678901234567890  # 30 digits


def _calls(*calls: tuple[str, dict[str, Any]]) -> ModelMessage:
    parts = [
        ToolCallPart(id=f"call_{i}", name=name, arguments=args)
        for i, (name, args) in enumerate(calls)
    ]
    return ModelMessage(role="assistant", parts=list(parts))


async def test_a_30_digit_integer_is_a_tool_error_and_the_turn_completes(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, features=(scheduling(SchedulingOptions(timer=False)),)) as h:

        def respond(request: Request) -> Any:
            if request.messages[-1].role == "tool":
                return "Texted you; the order number has to go as text."
            return _calls(
                ("send_message", {"channel": "sms", "to": "owner", "text": "parcel at the door"}),
                (
                    "db_query",
                    {
                        "operation": "insertOne",
                        "collection": "ai_orders",
                        "data": {"order": HUGE, "items": [{"qty": -HUGE}]},
                    },
                ),
            )

        h.model.responder = respond
        await h.chat.say("text me about the parcel and note order 1234...")
        await h.settle()

        assert h.sms == ["parcel at the door"]
        assert h.chat.texts()[-1] == "Texted you; the order number has to go as text."
        sent, refused = [p.result for p in h.model.requests[-1].messages[-1].parts]
        assert sent["queued"] is True
        assert refused == {
            "error": "invalid arguments for db_query: data.order: integer too large "
            "(max 9223372036854775807); send it as a string"
        }
        db = h.app.deps.db
        assert await db["ai_orders"].count_documents({}) == 0
        [row] = await db["inbox"].find({"channel": "telegram"}).to_list()
        assert row["status"] == "done", row
        stored = await db["messages"].find({}, sort=[("seq", 1)]).to_list()
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        call = stored[1]["parts"][1]
        assert call["arguments"]["data"]["order"] == str(HUGE)  # kept, as text
        assert call["arguments"]["data"]["items"][0]["qty"] == str(-HUGE)


async def test_a_tool_result_with_a_huge_integer_is_stored_as_text(db: Any) -> None:
    """An MCP tool or a web API may answer with any integer; history keeps it as text."""
    from agent.llm.types import MessagesAdapter, ToolResultPart

    result = {"id": HUGE, "rows": [{"n": 1, "big": -HUGE}], "ok": True}
    message = ModelMessage(
        role="tool", parts=[ToolResultPart(call_id="c1", name="ledger__lookup", result=result)]
    )
    await db["messages"].insert_one(message.model_dump(mode="json"))
    stored = await db["messages"].find_one({}, projection={"_id": 0})
    [back] = MessagesAdapter.validate_python([stored])
    assert back.parts[0].result == {  # type: ignore[union-attr]
        "id": str(HUGE),
        "rows": [{"n": 1, "big": str(-HUGE)}],
        "ok": True,
    }
    assert message.parts[0].result["id"] == HUGE  # type: ignore[union-attr]  # in memory: as sent


def test_a_value_nested_past_the_recursion_limit_is_walked_without_recursion() -> None:
    """A hostile argument nested 20,000 deep is checked and made storable, not a
    RecursionError out of the turn."""
    from storage.ejson import oversized_int, storable_ints

    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(20_000):
        inner["a"] = {}
        inner = inner["a"]
    assert oversized_int(deep) is None
    assert storable_ints(deep) is deep  # nothing to change: the value itself
    inner["n"] = [1, HUGE]
    assert oversized_int(deep) == ".".join(["a"] * 20_000 + ["n", "1"])
    stored = storable_ints(deep)
    for _ in range(20_000):
        stored = stored["a"]
    assert stored == {"n": [1, str(HUGE)]}
