"""A replayed message finds the answer stored before the crash among its conversation's
newest messages: after a long exchange of tool calls too, and never another message's."""

from __future__ import annotations

from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.conversations import REPLAY_LOOKBACK, MessageRepo

Doc = dict[str, Any]


def user(text: str, inbox_id: str) -> Doc:
    return {"role": "user", "parts": [{"kind": "text", "text": text}], "inbox_id": inbox_id}


def assistant(text: str = "", *, tool: bool = False) -> Doc:
    parts: list[Doc] = [{"kind": "text", "text": text}] if text else []
    if tool:
        parts.append({"kind": "tool_call", "name": "db_query", "id": "c1", "args": {}})
    return {"role": "assistant", "parts": parts}


def tool_result() -> Doc:
    return {"role": "tool", "parts": [{"kind": "tool_result", "id": "c1", "result": {}}]}


async def test_the_answer_after_a_long_exchange_is_found(db: AsyncDatabase[Doc]) -> None:
    repo, conv = MessageRepo(db), ObjectId()
    await repo.append(conv, [user("earlier", "in-1"), assistant("earlier answer")])
    steps = (REPLAY_LOOKBACK - 2) // 2  # the whole exchange just fits
    exchange = [user("look it up", "in-2")]
    for _ in range(steps):
        exchange += [assistant(tool=True), tool_result()]
    exchange.append(assistant("found it"))
    await repo.append(conv, exchange)

    assert await repo.answer_for(conv, "in-2") == "found it"
    assert await repo.answer_for(ObjectId(), "in-2") is None  # another conversation
    assert await repo.answer_for(conv, "in-3") is None  # never stored


async def test_an_exchange_cut_short_has_no_answer(db: AsyncDatabase[Doc]) -> None:
    repo, conv = MessageRepo(db), ObjectId()
    await repo.append(conv, [user("one", "in-1"), assistant("first")])
    await repo.append(conv, [user("two", "in-2"), assistant(tool=True), tool_result()])
    await repo.append(conv, [user("three", "in-3"), {**assistant(), "error": "model_unavailable"}])

    assert await repo.answer_for(conv, "in-1") == "first"
    assert await repo.answer_for(conv, "in-2") is None  # the tool ran, no text came after
    assert await repo.answer_for(conv, "in-3") is None  # the model failed: ask again
