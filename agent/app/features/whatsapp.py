"""Wires WhatsApp into the app: channel, trust resolver, tools, prompt section, notices.

Built by the WhatsApp entry of the channel registry (``agent.app.registry``), only when
``WHATSAPP_ENABLED=true``; the channel module (and neonize with it) is imported only
then. Its connection notices go through the alert router, which a feature after this
one provides: they wait in a queue until the agent exists (``Parts.start``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent.alerts.router import AlertRouter
from agent.app.application import Built, ChannelSetup, Core, FeatureContext, Parts
from agent.config import Settings
from agent.conversation.dispatch import TierResolver, Trust
from agent.owner import OwnerSettings
from agent.reach import Reach
from agent.tools.whatsapp import WHATSAPP_TOOLS, permissions_section, whatsapp_connected
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import BurstRule
from channels.registry import ChannelName
from channels.types import InboundMessage, OutboundMessage
from runtime.tasks import stop_task
from storage.repos.whatsapp_permissions import WhatsAppPermissions, normalise_address

if TYPE_CHECKING:
    from channels.whatsapp import ClientFactory

log = logging.getLogger(__name__)


def make_resolver(settings: Settings, permissions: WhatsAppPermissions) -> TierResolver:
    """Owner: ``OWNER_PHONE`` or the "message yourself" chat. Contact: a record with
    ``can_read`` (a group by its JID). Everyone else: None, so no model call.

    ``can_reply`` is decided here, at handling time, so a revoke also silences
    messages still queued.
    """

    async def resolve(message: InboundMessage) -> Trust | None:
        is_group = bool(message.meta.get("is_group"))
        if message.meta.get("self_chat") and not is_group:
            return Trust("owner")
        if not is_group and settings.owner_phone and message.sender_id == settings.owner_phone:
            return Trust("owner")
        address = normalise_address(message.chat_id if is_group else message.sender_id)
        record = await permissions.get(address) if address else None
        if record is None or not record.can_read:
            return None
        return Trust("contact", can_reply=record.can_reply)

    return resolve


def make_notifier(
    outbox: Outbox, reach: Reach, owner: OwnerSettings, alerts: AlertRouter | None
) -> Callable[[str, str], Awaitable[None]]:
    """Connection notices reach the owner somewhere else than WhatsApp.

    Through the alert router when it runs (deduplicated while open); otherwise
    straight to the owner's main chat other than WhatsApp.
    """

    async def notify(kind: str, text: str) -> None:
        if alerts is not None:
            await alerts.raise_alert(
                severity="warning",
                title="WhatsApp is logged out" if kind != "disconnected" else "WhatsApp is down",
                body=text,
                dedupe_key=f"{ChannelName.WHATSAPP}:{kind}",
                source=ChannelName.WHATSAPP,
            )
            return
        primary = owner.current.primary_channel
        target = reach.chat(avoid=ChannelName.WHATSAPP, primary=primary)
        if target.channel not in reach.running:
            log.warning("no other channel to tell the owner: %s", text)
            return
        await outbox.enqueue(
            OutboundMessage(
                channel=target.channel,
                chat_id=target.chat_id,
                text=text,
                idempotency_key=f"whatsapp-notice:{kind}:{uuid.uuid4().hex}",
            )
        )

    return notify


BURST_SECONDS = 3.0
"""A contact's quick messages within this many seconds are answered as one."""


def burst_rule(settings: Settings, seconds: float) -> BurstRule:
    """Contacts type in bursts; the owner, their own chat and groups are answered at once."""

    def rule(message: InboundMessage) -> float:
        meta = message.meta
        owner = bool(meta.get("self_chat")) or message.sender_id == settings.owner_phone
        return 0.0 if owner or meta.get("is_group") else seconds

    return rule


def whatsapp_channel(
    setup: ChannelSetup,
    client_factory: ClientFactory | None = None,
    *,
    burst_seconds: float = BURST_SECONDS,
    **options: Any,
) -> Built | None:
    """The channel (not started), and the feature that gives the agent its tools, its
    resolver and its notices; tests pass a fake ``client_factory`` and short timings.

    The connection notices wait in a queue until the alert router, which a later
    feature provides, exists (``Parts.start``); none is lost before then."""
    if not setup.exclusive_transports:
        log.info("whatsapp: left to `watchkeeper run` (one session, one client)")
        return None
    from channels.whatsapp import WhatsAppChannel, neonize_client

    settings = setup.settings
    permissions = WhatsAppPermissions(setup.database.db)

    async def group_allowed(jid: str) -> bool:
        record = await permissions.get(jid.lower())
        return record is not None and record.can_read

    notices: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def notify(kind: str, text: str) -> None:
        notices.put_nowait((kind, text))

    channel = WhatsAppChannel(
        settings.whatsapp_session_path,
        client_factory=client_factory or neonize_client,
        group_allowed=group_allowed,
        notify=notify,
        clock=setup.clock,
        **options,
    )
    log.info("whatsapp: session in %s", settings.whatsapp_session_path)

    async def whatsapp(ctx: FeatureContext) -> AsyncIterator[Parts]:
        telling: list[asyncio.Task[None]] = []

        async def start(core: Core) -> None:
            """Tell the owner of each notice, through the alert router when it runs."""
            tell = make_notifier(ctx.outbox, ctx.reach, ctx.owner, core.deps.alerts)
            telling.append(asyncio.create_task(_tell(notices, tell), name="whatsapp-notices"))

        yield Parts(
            tools=tuple((tool, whatsapp_connected) for tool in WHATSAPP_TOOLS),
            resolvers={ChannelName.WHATSAPP: make_resolver(settings, permissions)},
            burst_rules={ChannelName.WHATSAPP: burst_rule(settings, burst_seconds)},
            prompt_sections=(permissions_section,),
            start=start,
        )
        for task in telling:
            await stop_task(task)

    return Built(channel, feature=whatsapp)


async def _tell(
    notices: asyncio.Queue[tuple[str, str]], tell: Callable[[str, str], Awaitable[None]]
) -> None:
    while True:
        kind, text = await notices.get()
        try:
            await tell(kind, text)
        except Exception:
            log.exception("could not deliver the WhatsApp %s notice", kind)
