"""``save_memory`` and ``update_db_schema``: the model's own notes about the owner."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from storage.repos import MEMORY_LIMIT, MemoryTooLong


class SaveMemoryArgs(BaseModel):
    memory: str = Field(description="The complete memory text (replaces the old one).")


class UpdateDbSchemaArgs(BaseModel):
    schema_: str = Field(alias="schema", description="Markdown description of your collections.")


async def _save_memory(args: SaveMemoryArgs, ctx: RunContext) -> ToolResult:
    try:
        await ctx.deps.instructions.set_memory(args.memory)
    except MemoryTooLong as exc:
        raise ToolError(str(exc)) from None
    return {"success": True, "length": len(args.memory), "limit": MEMORY_LIMIT}


async def _update_db_schema(args: UpdateDbSchemaArgs, ctx: RunContext) -> ToolResult:
    if len(args.schema_) > 8_000:
        raise ToolError("schema is over 8,000 characters; keep it a concise summary")
    await ctx.deps.instructions.set_db_schema(args.schema_)
    return {"success": True}


SAVE_MEMORY = Tool(
    name="save_memory",
    guidance=("save_memory replaces the whole memory: send old + new facts, <=4000 chars."),
    description="Replace your long-term memory about the owner (max 4000 characters).",
    args=SaveMemoryArgs,
    handler=_save_memory,
)
UPDATE_DB_SCHEMA = Tool(
    name="update_db_schema",
    guidance=("update_db_schema after creating or changing an ai_ collection."),
    description="Replace the Markdown documentation of your database collections.",
    args=UpdateDbSchemaArgs,
    handler=_update_db_schema,
)
