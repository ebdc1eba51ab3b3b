"""The four WhatsApp tools (DESIGN.md names) and the owner's permissions prompt section.

All four are owner-only (``writes=True``): reading other people's messages or the
permission list is as private as writing them, so a contact gets no WhatsApp tool
at all. They are offered only while the channel reports ``connected``. Permission
records change only through ``whatsapp_manage_permission``, which validates.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool

from agent.context import RunContext
from agent.llm.untrusted import for_model
from agent.tools.base import Tool, ToolError, ToolResult
from agent.tools.sending import deliver
from channels.registry import ChannelName
from storage.outside import Outside
from storage.repos.inbox import InboxRow, newest_received
from storage.repos.whatsapp_permissions import (
    Permission,
    WhatsAppPermissions,
    normalise_address,
)

TEXT_LIMIT = 4_000


def whatsapp_connected(ctx: RunContext) -> bool:
    """Availability predicate: the running WhatsApp channel says it is connected."""
    channel = ctx.deps.channels.get(ChannelName.WHATSAPP)
    return channel is not None and channel.status().get("state") == "connected"


def _repo(ctx: RunContext) -> WhatsAppPermissions:
    return WhatsAppPermissions(ctx.deps.db)


def _address(raw: str, field: str) -> str:
    address = normalise_address(raw)
    if address is None:
        raise ToolError(
            f"{field} must be an E.164 number such as +14155550100 (or a group JID "
            f"ending in @g.us), got {raw!r}"
        )
    return address


class ReadArgs(BaseModel):
    contact: str | None = Field(None, description="E.164; omit for all")
    limit: int = Field(20, ge=1, le=100)


async def _read(args: ReadArgs, ctx: RunContext) -> ToolResult:
    readable = {p.phone_number: p for p in await _repo(ctx).readable()}
    if args.contact is not None:
        wanted = _address(args.contact, "contact")
        if wanted not in readable:
            raise ToolError(f"{wanted} has no can_read permission")
        readable = {wanted: readable[wanted]}
    if not readable:
        return {"messages": [], "note": "no contact has can_read permission"}
    numbers = {a for a in readable if "@" not in a}
    groups = {a for a in readable if "@" in a}

    def keep(row: InboxRow) -> bool:
        meta = row.meta
        if row.channel != ChannelName.WHATSAPP or meta.get("self_chat") is True:
            return False
        if row.sender_id in numbers and meta.get("is_group") is not True:
            return True
        return row.chat_id in groups

    # Newest first, read back from now a window at a time: the inbox holds every message.
    newest = await newest_received(ctx.deps.db, keep, args.limit, ctx.now)

    def said(row: InboxRow, text: str) -> str:
        """The contact's own words (their message, the name they gave themselves)."""
        if not text:
            return ""
        return for_model(Outside(text, f"a WhatsApp message from {row.sender_id}"))

    rows = [
        {
            "from": row.sender_id,
            "name": readable.get(row.sender_id, Permission(row.sender_id)).display_name
            or said(row, row.sender_name),
            "chat": row.chat_id,
            "text": said(row, row.text),
            "received_at": row.received_at,  # shown in the owner's timezone
        }
        for row in newest
    ]
    rows.reverse()  # oldest first reads like a conversation
    return {"messages": rows}


class SendArgs(BaseModel):
    phone: str = Field(description="E.164")
    message: str


async def _send(args: SendArgs, ctx: RunContext) -> ToolResult:
    phone = _address(args.phone, "phone")
    text = args.message.strip()
    if not text:
        raise ToolError("message is empty")
    if len(text) > TEXT_LIMIT:
        raise ToolError(f"message is {len(text)} characters; the limit is {TEXT_LIMIT}")
    if phone != ctx.deps.settings.owner_phone:
        record = await _repo(ctx).get(phone)
        if record is None or not record.can_reply:
            raise ToolError(
                f"{phone} has no can_reply permission; ask the owner to grant it with "
                "whatsapp_manage_permission first"
            )
    result = await deliver(ctx, ChannelName.WHATSAPP, phone, text)
    return {"queued": result["queued"], "to": phone, "duplicate": result["duplicate"]}


class PermissionArgs(BaseModel):
    action: Literal["grant", "update", "revoke", "remove"]
    phone_number: str
    display_name: str | None = Field(None, max_length=100)
    can_read: StrictBool | None = None
    can_reply: StrictBool | None = None


async def _manage(args: PermissionArgs, ctx: RunContext) -> ToolResult:
    address = _address(args.phone_number, "phone_number")
    if address == ctx.deps.settings.owner_phone:
        raise ToolError("that is the owner's number; the owner always has full access")
    repo = _repo(ctx)
    fields: dict[str, Any] = {
        k: v
        for k, v in (
            ("display_name", args.display_name),
            ("can_read", args.can_read),
            ("can_reply", args.can_reply),
        )
        if v is not None
    }
    if args.action == "remove":
        removed = await repo.remove(address)
        return {"removed": removed, "phone_number": address}
    if args.action == "grant":
        fields.setdefault("can_read", True)
        fields.setdefault("can_reply", False)
        fields.setdefault("display_name", "")
        record = await repo.put(address, fields, create=True)
    elif args.action == "revoke":
        record = await repo.put(address, {"can_read": False, "can_reply": False}, create=False)
    else:
        if not fields:
            raise ToolError("update needs at least one of display_name, can_read, can_reply")
        record = await repo.put(address, fields, create=False)
    if record is None:
        raise ToolError(f"no permission record for {address}; use action 'grant' to create one")
    return {"action": args.action, "permission": record.view()}


class NoArgs(BaseModel):
    pass


async def _list(_args: NoArgs, ctx: RunContext) -> ToolResult:
    return {"permissions": [p.view() for p in await _repo(ctx).all()]}


WHATSAPP_READ_MESSAGES: Tool[Any] = Tool(
    name="whatsapp_read_messages",
    description="Recent WhatsApp messages from contacts with can_read.",
    args=ReadArgs,
    handler=_read,
    untrusted_result="WhatsApp contacts' messages",
    acting=lambda _: False,
)
WHATSAPP_SEND_MESSAGE: Tool[Any] = Tool(
    name="whatsapp_send_message",
    description="WhatsApp message to phone: a contact with can_reply, or the owner. Confirm "
    "with the owner before writing to a contact.",
    args=SendArgs,
    handler=_send,
)
WHATSAPP_MANAGE_PERMISSION: Tool[Any] = Tool(
    name="whatsapp_manage_permission",
    description="A WhatsApp contact's permission by phone_number (E.164). grant or update: "
    "display_name, can_read (default true), can_reply (default false); revoke: both "
    "false; remove: delete.",
    args=PermissionArgs,
    handler=_manage,
)
WHATSAPP_LIST_PERMISSIONS: Tool[Any] = Tool(
    name="whatsapp_list_permissions",
    description="Every WhatsApp permission (no fields).",
    args=NoArgs,
    handler=_list,
    acting=lambda _: False,
)
WHATSAPP_TOOLS: tuple[Tool[Any], ...] = (
    WHATSAPP_READ_MESSAGES,
    WHATSAPP_SEND_MESSAGE,
    WHATSAPP_MANAGE_PERMISSION,
    WHATSAPP_LIST_PERMISSIONS,
)


async def permissions_section(ctx: RunContext) -> str | None:
    """The owner's prompt lists the permissions while WhatsApp is connected."""
    if ctx.tier != "owner" or not whatsapp_connected(ctx):
        return None
    records = await _repo(ctx).all()
    lines = [
        f"- {p.phone_number} {p.display_name or '(no name)'}: "
        f"can_read={str(p.can_read).lower()}, can_reply={str(p.can_reply).lower()}"
        for p in records
    ]
    body = "\n".join(lines) if lines else "(none: only you can talk to me on WhatsApp)"
    return (
        "## WhatsApp permissions\nWhatsApp is connected. Contacts with can_reply=true get "
        "automatic replies; change permissions only with whatsapp_manage_permission.\n" + body
    )
