"""Telegram pairing and the paired owners: the dispatcher's pairing step, the paired
owners read again from the database now and then (``agent.reach.Owners``), and the
``owners`` status section (``/status``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from agent.app.application import FeatureContext, Parts
from agent.config import Settings
from agent.conversation.pairing import REFRESH_EVERY, Pairing
from channels.registry import ChannelName
from runtime.tasks import stop_task, wait_event

log = logging.getLogger(__name__)


async def pairing_feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
    """Keeps the pairing the root built (before the channels' first message) current."""
    pairing = ctx.pairing

    async def owners_section() -> dict[str, Any]:
        return {"owners": await owners_status(ctx.settings, pairing)}

    if ChannelName.TELEGRAM in ctx.channels and ctx.reach.address(ChannelName.TELEGRAM) is None:
        log.warning("telegram: no owner yet; write to the bot to get a pairing code")
        for pending in await pairing.store.pending():
            log.warning("pairing: %s", pending.command(pairing.cli))
    stop = asyncio.Event()
    task = asyncio.create_task(_keep_current(pairing, stop), name="pairing-refresh")
    yield Parts(status=(owners_section,))
    stop.set()
    await stop_task(task)


async def owners_status(settings: Settings, pairing: Pairing) -> dict[str, Any]:
    """Who counts as the owner on Telegram (the user ``id``; for a paired owner also
    ``name`` and ``handle`` as Telegram gave them), and how many pairing codes wait."""
    paired = await pairing.store.owners()
    configured = settings.owner_telegram_ids
    telegram: list[dict[str, Any]] = [
        {"id": user_id, "source": "OWNER_TELEGRAM_IDS"} for user_id in configured
    ]
    telegram += [
        {"id": o.user_id, "name": o.name, "handle": o.handle, "source": "paired"}
        for o in paired
        if o.user_id not in configured
    ]
    return {ChannelName.TELEGRAM: telegram, "pending_pairing": len(await pairing.store.pending())}


async def _keep_current(pairing: Pairing, stop: asyncio.Event) -> None:
    """Another process (``watchkeeper pair``) adds owners: look again now and then."""
    while not await wait_event(stop, REFRESH_EVERY.total_seconds()):
        try:
            await pairing.refresh()
        except Exception as exc:  # the database is away for a moment: next time
            log.warning("pairing: could not reload the paired owners (%s)", exc)
