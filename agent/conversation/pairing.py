"""Telegram pairing on the bot's side (DESIGN.md, Trust tiers).

While no Telegram owner is known (none in ``OWNER_TELEGRAM_IDS``, none paired), a
person who writes gets a 6-digit code and the log says how to approve it with
``watchkeeper pair CODE``. Their text is not kept and never reaches the model.

Strangers can fill the few pending slots; the owner is never kept out by them:
``watchkeeper pair --new`` makes a code on the server, and whoever sends it to the bot
(``/start CODE`` or the code alone) becomes an owner, whether or not an owner is
known already.

The paired owners live in the database; ``agent.reach.Owners`` keeps the last read, so
every place that asks who the owner is sees them without a database query: it reads
them again at start, every ``REFRESH_EVERY``, after a code is claimed and whenever an
unknown Telegram user writes (``watchkeeper pair`` runs in another process).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from agent.reach import Owners
from channels.types import InboundMessage, Reply
from storage.repos.pairing import (
    CODE_TTL,
    MAX_PENDING,
    PairedOwner,
    PairingStore,
    invite_code_in,
    who,
)

log = logging.getLogger(__name__)
REFRESH_EVERY = timedelta(seconds=30)
"""How soon a process that saw no message from the new owner learns of them (alerts
and deliveries go to the first owner)."""


CLI = "watchkeeper"
"""How the hints name the command line when the app is not told (``build_app``'s ``cli``)."""


def code_text(code: str, cli: str = CLI) -> str:
    """``cli``: how this install's command line is run (``agent.cli.command``)."""
    minutes = int(CODE_TTL.total_seconds() // 60)
    return (
        "Hello! This assistant has no owner yet. To become its owner, run this where it "
        f"runs:\n\n{cli} pair {code}\n\nThe code is valid for {minutes} minutes. "
        "Your message was not read."
    )


def busy_text(cli: str = CLI) -> str:
    return (
        "Hello! This assistant has no owner yet and other pairing requests are waiting. "
        "Try again in a few minutes. Your message was not read. If you are setting it up: "
        f"run {cli} pair --new where it runs, and send me the code it prints."
    )


WELCOME = "You are now the owner of this assistant. Write to me any time; /help lists the commands."
ZONE_QUESTION = (
    "Where are you? Name a city (or a timezone like Europe/Berlin): quiet hours "
    "(22:00-07:00) and reminders follow your clock, and until you say, they run on UTC."
)


def welcome(zone_known: bool) -> str:
    """The greeting of a new owner; it asks where they are while the zone is UTC because
    nobody chose one."""
    return WELCOME if zone_known else f"{WELCOME}\n\n{ZONE_QUESTION}"


class Pairing:
    def __init__(
        self,
        store: PairingStore,
        owners: Owners,
        *,
        cli: str = CLI,
        zone_known: Callable[[], bool] = lambda: True,
    ) -> None:
        """``owners``: who is owner, read again here when a code is claimed. ``cli``:
        how this install's command line is run, as the hints name it (the CLI works it
        out: ``agent.cli.command``). ``zone_known``: whether anyone chose the owner's
        timezone (else the welcome asks where they are)."""
        self.store = store
        self.owners = owners
        self.cli = cli
        self.zone_known = zone_known

    async def refresh(self) -> list[PairedOwner]:
        """Read the paired owners again (``Owners.refresh``); returns them."""
        return await self.owners.refresh()

    async def offer(self, message: InboundMessage) -> list[Reply] | None:
        """The answer to a Telegram stranger: the welcome when they sent an owner's code
        (``watchkeeper pair --new``); while no owner is known, their own code (at most
        once a minute), "try later" when ``MAX_PENDING`` others wait, or nothing. None
        outside a private chat (codes are neither handed out nor taken in groups) and,
        once an owner is known, for anything but an owner's code."""
        if message.meta.get("chat_type", "private") != "private":
            return None
        try:
            user_id = int(message.sender_id)
        except ValueError:
            return None
        username = message.meta.get("username")
        handle = username if isinstance(username, str) else ""
        name = message.sender_name
        code = invite_code_in(message.text)
        if code is not None:
            owner = await self.store.claim(code, user_id, message.chat_id, name, handle=handle)
            if owner is not None:
                await self.refresh()
                log.warning(
                    "pairing: %s sent the code from `%s pair --new` and is now "
                    "an owner on Telegram",
                    owner.who(),
                    self.cli,
                )
                return [Reply(welcome(self.zone_known()))]
            log.info("pairing: %s sent a code that is no owner's code", who(user_id, name, handle))
        if self.owners.telegram_ids:
            return None
        offer = await self.store.offer(user_id, message.chat_id, name, handle=handle)
        if offer.outcome == "full":
            log.info(
                "pairing: %d requests pending already; %s was told to try later (the "
                "owner can run `%s pair --new`)",
                MAX_PENDING,
                who(user_id, name, handle),
                self.cli,
            )
            return [Reply(busy_text(self.cli))]
        if offer.pending is None or offer.outcome == "quiet":
            return []
        minutes = int(CODE_TTL.total_seconds() // 60)
        log.warning("pairing: %s (code valid %d minutes)", offer.pending.command(self.cli), minutes)
        return [Reply(code_text(offer.pending.code, self.cli))]
