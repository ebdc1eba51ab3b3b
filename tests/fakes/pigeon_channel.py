"""A test-only channel, "pigeon", that joins the app through the channel registry alone.

Nothing outside this module knows it: no ``ChannelName`` member, no setting, no feature.
``pigeon_entry()`` is its one registry entry (``agent.app.registry.ChannelEntry``): its
rules (the owner is whoever holds ``OWNER_PHONE``; it is a chat, so alerts come here),
its factory (the channel, built once the database is open) and its route (the loft's
webhook).

The transport is a loft posting each letter as JSON (``{"id", "from", "text"}``) to
``POST /webhooks/pigeon``; what the app sends flies out into ``PigeonChannel.flown``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agent.app.application import Built, ChannelSetup
from agent.app.registry import ChannelEntry
from agent.config import Settings
from agent.reach import Owners
from channels.registry import Delivery
from channels.types import InboundMessage, InboundSink, OutboundMessage, SendResult
from runtime.clock import Clock

PIGEON = "pigeon"
WEBHOOK = "/webhooks/pigeon"


class PigeonChannel:
    """A ``channels.types.Channel``: letters in through the webhook, out into ``flown``."""

    name = PIGEON

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.flown: list[OutboundMessage] = []
        self.landed = asyncio.Event()
        """Set by every letter sent."""
        self._sink: InboundSink | None = None

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink

    async def stop(self) -> None:
        self._sink = None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.flown.append(message)
        self.landed.set()
        return SendResult(external_ids=(f"flight-{len(self.flown)}",))

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"connected": self._sink is not None}

    async def handle_webhook(self, request: web.Request) -> web.Response:
        """One letter from the loft: stored (acknowledged) before the answer."""
        if self._sink is None:
            return web.Response(status=503, text="pigeon channel not started")
        letter = await request.json()
        message = InboundMessage(
            channel=PIGEON,
            external_id=str(letter["id"]),
            chat_id=str(letter["from"]),
            sender_id=str(letter["from"]),
            text=str(letter["text"]),
            received_at=self.clock(),
        )
        return web.json_response({"stored": await self._sink(message)})


@dataclass(frozen=True)
class PigeonRules:
    """``channels.registry.ChannelRules`` of the pigeon post."""

    name: str = PIGEON
    delivery: Delivery = field(default_factory=Delivery)

    def configured(self, settings: Settings) -> bool:
        return settings.owner_phone is not None

    def unconfigured(self) -> str:
        return "the pigeon post needs OWNER_PHONE"

    def owner_address(self, owners: Owners) -> str | None:
        return owners.phone

    def no_owner(self) -> str:
        return "OWNER_PHONE is not set, so no pigeon knows the owner"

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: Owners) -> bool:
        return bool(owners.phone) and sender_id == owners.phone


def pigeon_channel(setup: ChannelSetup) -> Built:
    """The factory: the channel (the app starts and stops it) and the loft's webhook."""
    loft = PigeonChannel(setup.clock)
    return Built(loft, routes=(("POST", WEBHOOK, loft.handle_webhook),))


def pigeon_entry() -> ChannelEntry:
    """The pigeon post's one registry entry."""
    return ChannelEntry(PigeonRules(), late=pigeon_channel)
