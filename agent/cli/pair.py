"""``watchkeeper pair CODE``: approve a pending Telegram pairing; ``--list`` shows them;
``--new`` prints a code the owner sends to the bot (strangers' requests cannot block
it); ``--remove USER_ID`` unpairs an owner (a running process stops answering them as
the owner within ``agent.conversation.pairing.REFRESH_EVERY``, 30 s).

Works beside a running ``watchkeeper run`` (it attaches to its embedded database) and
without one. The running process sees the new owner at their next message, and greets
them through the outbox (sent now while ``run`` is up, else at its next start).
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from agent.cli.command import cli_command
from agent.config import Settings
from agent.conversation.pairing import welcome
from agent.owner import OwnerSettings
from channels.delivery.outbox import Outbox
from channels.registry import ChannelName
from channels.types import OutboundMessage
from runtime.clock import Clock, utcnow
from storage.repos.pairing import CODE_TTL, PairedOwner, PairingStore, invite_code_in

CODE = re.compile(r"\d{6}")


async def pair(
    settings: Settings,
    code: str | None,
    *,
    list_only: bool = False,
    remove: int | None = None,
    new: bool = False,
    out: TextIO | None = None,
    clock: Clock = utcnow,
) -> int:
    """Approve ``code``, list pairings, make an owner's code (``new``) or unpair;
    returns the process exit code."""
    stream = out or sys.stdout
    if sum([code is not None, list_only, remove is not None, new]) > 1:
        print("watchkeeper: give one of CODE, --list, --new or --remove USER_ID", file=sys.stderr)
        return 2
    if remove is not None:
        return await _remove(settings, remove, stream, clock)
    if new:
        return await _new(settings, stream, clock)
    if code is not None and invite_code_in(code) is not None:
        print(
            f"watchkeeper: that is an owner's code from `{cli_command()} pair --new`: send "
            "it to the bot on Telegram instead",
            file=sys.stderr,
        )
        return 2
    if not list_only and (code is None or not CODE.fullmatch(code.strip())):
        print(
            "watchkeeper: a pairing code is the 6 digits the bot sent on Telegram, "
            f"as in `{cli_command()} pair 123456`; `{cli_command()} pair --list` shows "
            "pending ones",
            file=sys.stderr,
        )
        return 2
    from storage.db import open_configured  # pymongo: loaded when a database opens

    async with open_configured(settings) as db:
        store = PairingStore(db.db, clock)
        if list_only or code is None:
            lines = await listing(store, settings)
            print("\n".join(lines), file=stream)
            return 0
        owner = await store.approve(code.strip())
        if owner is None:
            pending = await store.pending()
            hint = (
                "pending: " + "; ".join(f"{p.code} for {p.who()}" for p in pending)
                if pending
                else "none is pending: write to the bot on Telegram to get one"
            )
            print(
                f"watchkeeper: no pending pairing code {code.strip()} (wrong, expired or "
                f"already used); {hint}",
                file=sys.stderr,
            )
            return 2
        prefs = await OwnerSettings(db.db, clock, settings.timezone).load()
        zone_known = settings.timezone_chosen or prefs.zone_stored
        await _welcome(Outbox(db.db, {}, clock), owner, welcome(zone_known))
    print(
        f"{owner.who()} is now an owner on Telegram; other pending codes were dropped.", file=stream
    )
    return 0


async def _new(settings: Settings, stream: TextIO, clock: Clock) -> int:
    from storage.db import open_configured  # pymongo: loaded when a database opens

    async with open_configured(settings) as db:
        invite = await PairingStore(db.db, clock).invite()
    minutes = int(CODE_TTL.total_seconds() // 60)
    print(
        f"Send this to the bot on Telegram, from the account that should be an owner, "
        f"within {minutes} minutes:\n\n    /start {invite.code}\n\n"
        "(the code alone works too). The first person who sends it becomes an owner; "
        "it works once, and strangers' pairing requests do not stand in its way.",
        file=stream,
    )
    return 0


async def _remove(settings: Settings, user_id: int, stream: TextIO, clock: Clock) -> int:
    if user_id in settings.owner_telegram_ids:
        print(
            f"watchkeeper: {user_id} is an owner through the setting OWNER_TELEGRAM_IDS, "
            "not by pairing; remove it from there and restart",
            file=sys.stderr,
        )
        return 2
    from storage.db import open_configured  # pymongo: loaded when a database opens

    async with open_configured(settings) as db:
        store = PairingStore(db.db, clock)
        removed = await store.remove(user_id)
        if removed is None:
            owners = [o.who() for o in await store.owners()]
            known = "paired owners: " + "; ".join(owners) if owners else "nobody is paired"
            print(f"watchkeeper: {user_id} is not a paired owner ({known})", file=sys.stderr)
            return 2
    print(
        f"{removed.who()} is no longer an owner; a running watchkeeper stops answering them "
        "as the owner within 30 s.",
        file=stream,
    )
    return 0


async def listing(store: PairingStore, settings: Settings) -> list[str]:
    """Owners and pending pairings, one per line (``--list`` and ``doctor``)."""
    lines = [f"owner: Telegram {i} (OWNER_TELEGRAM_IDS)" for i in settings.owner_telegram_ids]
    lines += [
        f"owner: {o.who()}, paired {o.paired_at:%Y-%m-%d %H:%M} UTC"
        for o in await store.owners()
        if o.user_id not in settings.owner_telegram_ids
    ]
    pending = await store.pending()
    lines += [f"pending: {p.command(cli_command())}" for p in pending]
    lines += [
        f"owner's code ({cli_command()} pair --new) waiting, valid until {until:%H:%M} UTC"
        for until in await store.invites_waiting()
    ]
    if not lines:
        lines.append("no owner and no pending pairing: write to the bot on Telegram")
    return lines


async def _welcome(outbox: Outbox, owner: PairedOwner, text: str) -> None:
    if not owner.chat_id:
        return
    key = f"pairing:{owner.user_id}:{owner.paired_at.isoformat()}"
    message = OutboundMessage(ChannelName.TELEGRAM, owner.chat_id, text, key)
    await outbox.enqueue(message, send_now=False)  # the running outbox sends it
