"""Times in tool replies: ISO 8601 in the owner's timezone with its offset, and
``db_query`` dates as Extended JSON with that offset that parse back to the same instant."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from bson import json_util
from pydantic import BaseModel

from agent.context import AgentDeps, RunContext
from agent.owner import OwnerSettings
from agent.tools.base import Tool, ToolResult, Toolset, result_json
from agent.tools.db import DB_QUERY
from tests.contexts import owner_ctx

MOMENT = datetime(2026, 11, 26, 5, 46, 4, 243000, tzinfo=UTC)


class NoArgs(BaseModel):
    pass


async def _times(_: NoArgs, ctx: RunContext) -> ToolResult:
    return {
        "at": MOMENT,
        "naive": MOMENT.replace(tzinfo=None),  # as pymongo reads without tz_aware
        "nested": [{"until": datetime(2026, 7, 1, 22, 0, tzinfo=UTC)}],
        "count": 3,
    }


TIMES: Tool[NoArgs] = Tool(name="times", description="t", args=NoArgs, handler=_times)


def _berlin(deps: AgentDeps) -> RunContext:
    """An owner living in Berlin (their timezone, as ``manage_settings`` would set it)."""
    owner = OwnerSettings(deps.db, deps.clock, "Europe/Berlin")
    return owner_ctx(dataclasses.replace(deps, owner=owner))


async def test_every_datetime_in_a_tool_reply_is_iso_with_the_owners_offset(
    deps: AgentDeps,
) -> None:
    ctx = _berlin(deps)
    result = await Toolset([TIMES]).call("times", {}, ctx)
    assert result == {
        "at": "2026-11-26T06:46:04+01:00",
        "naive": "2026-11-26T06:46:04+01:00",
        "nested": [{"until": "2026-07-02T00:00:00+02:00"}],
        "count": 3,
    }
    text = result_json({"at": MOMENT}, ctx.tz)
    assert text == '{"at": "2026-11-26T06:46:04+01:00"}' and "+00:00" not in text


async def test_db_query_dates_show_the_owners_offset_and_round_trip(deps: AgentDeps) -> None:
    ctx = _berlin(deps)

    async def query(**args: Any) -> dict[str, Any]:
        result = await DB_QUERY.invoke(args, ctx)
        assert "error" not in result, result
        return result

    await query(
        operation="insertMany",
        collection="ai_events",
        data=[
            {"n": 1, "at": {"$date": "2026-11-26T19:30:00+01:00"}},
            {"n": 2, "at": {"$date": "2026-07-01T10:00:00.500Z"}},
        ],
    )
    stored = await deps.db.ai_events.find_one({"n": 1})
    assert stored is not None and stored["at"] == datetime(2026, 11, 26, 18, 30, tzinfo=UTC)

    rows = (await query(operation="find", collection="ai_events", sort={"n": 1}))["rows"]
    assert [r["at"] for r in rows] == [
        {"$date": "2026-11-26T19:30:00+01:00"},
        {"$date": "2026-07-01T12:00:00.500+02:00"},
    ]
    # Still Extended JSON: bson's own parser reads the same instants back.
    parsed = json_util.loads(json.dumps(rows))
    assert parsed[0]["at"] == datetime(2026, 11, 26, 18, 30)  # naive UTC, json_util's default
    assert parsed[1]["at"] == datetime(2026, 7, 1, 10, 0, 0, 500000)
    # What the model read can be pasted back into a filter, and Z means the same instant.
    for value in (rows[0]["at"], {"$date": "2026-11-26T18:30:00Z"}):
        found = await query(operation="find", collection="ai_events", filter={"at": value})
        assert [r["n"] for r in found["rows"]] == [1], value


async def test_the_db_query_description_says_how_dates_are_shown() -> None:
    text = DB_QUERY.description
    assert "owner's timezone with offset" in text and "offset or Z" in text
