"""Wires WhatsApp into the app: channel, trust resolver, tools, prompt section, notices.

Everything here runs only when ``WHATSAPP_ENABLED=true``; the channel module (and
neonize with it) is imported only then.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent.app.core import App, Feature
from agent.config import Settings
from agent.context import Tier
from agent.tools.whatsapp import WHATSAPP_TOOLS, permissions_section, whatsapp_connected
from channels.types import InboundMessage, OutboundMessage
from storage.whatsapp_permissions import WhatsAppPermissions, normalise_address

if TYPE_CHECKING:
    from channels.whatsapp import ClientFactory

log = logging.getLogger(__name__)
SESSION_FILE = "whatsapp.sqlite3"
Resolver = Callable[[InboundMessage], Awaitable[Tier | None]]


def make_resolver(settings: Settings, permissions: WhatsAppPermissions) -> Resolver:
    """Owner: ``OWNER_PHONE`` or the "message yourself" chat. Contact: a record with
    ``can_read`` (a group by its JID). Everyone else: None, so no model call.

    ``can_reply`` is decided here, at handling time, and put in the message's meta
    for the dispatcher, so a revoke also silences messages still queued.
    """

    async def resolve(message: InboundMessage) -> Tier | None:
        message.meta["can_reply"] = False
        is_group = bool(message.meta.get("is_group"))
        if message.meta.get("self_chat") and not is_group:
            return "owner"
        if not is_group and settings.owner_phone and message.sender_id == settings.owner_phone:
            return "owner"
        address = normalise_address(message.chat_id if is_group else message.sender_id)
        record = await permissions.get(address) if address else None
        if record is None or not record.can_read:
            return None
        message.meta["can_reply"] = record.can_reply
        return "contact"

    return resolve


def make_notifier(app: App) -> Callable[[str, str], Awaitable[None]]:
    """Connection notices reach the owner somewhere else than WhatsApp.

    Through the alert router when it runs (deduplicated while open); otherwise
    straight to the owner's first Telegram chat, or the terminal.
    """

    async def notify(kind: str, text: str) -> None:
        alerts = app.deps.services.get("alerts")
        if alerts is not None:
            await alerts.raise_alert(
                severity="warning",
                title="WhatsApp is logged out" if kind != "disconnected" else "WhatsApp is down",
                body=text,
                dedupe_key=f"whatsapp:{kind}",
                source="whatsapp",
            )
            return
        target = _fallback_target(app)
        if target is None:
            log.warning("no other channel to tell the owner: %s", text)
            return
        channel, chat_id = target
        await app.outbox.enqueue(
            OutboundMessage(
                channel=channel,
                chat_id=chat_id,
                text=text,
                idempotency_key=f"whatsapp-notice:{kind}:{uuid.uuid4().hex}",
            )
        )

    return notify


def _fallback_target(app: App) -> tuple[str, str] | None:
    if "telegram" in app.channels and app.settings.owner_telegram_ids:
        return "telegram", str(app.settings.owner_telegram_ids[0])
    if "console" in app.channels:
        return "console", "owner"
    return None


def make_whatsapp_feature(client_factory: ClientFactory | None = None, **options: Any) -> Feature:
    """The feature; tests pass a fake ``client_factory`` and short timings."""

    async def whatsapp(app: App, stack: contextlib.AsyncExitStack) -> None:
        if not app.settings.whatsapp_enabled:
            return
        if not app.exclusive_transports:
            log.info("whatsapp: left to `watchkeeper run` (one session, one client)")
            return
        from channels.whatsapp import WhatsAppChannel, neonize_client

        permissions = WhatsAppPermissions(app.deps.db)

        async def group_allowed(jid: str) -> bool:
            record = await permissions.get(jid.lower())
            return record is not None and record.can_read

        channel = WhatsAppChannel(
            app.settings.data_dir / SESSION_FILE,
            owner_phone=app.settings.owner_phone,
            client_factory=client_factory or neonize_client,
            group_allowed=group_allowed,
            notify=make_notifier(app),
            clock=app.clock,
            **options,
        )
        app.dispatcher.resolvers["whatsapp"] = make_resolver(app.settings, permissions)
        for tool in WHATSAPP_TOOLS:
            app.catalog.add(tool, whatsapp_connected)
        app.agent.sections.append(permissions_section)
        await channel.start(app.pipeline.submit)
        stack.push_async_callback(channel.stop)
        app.channels["whatsapp"] = channel
        log.info("channel: whatsapp (session in %s)", app.settings.data_dir / SESSION_FILE)

    return whatsapp


whatsapp_feature: Feature = make_whatsapp_feature()
