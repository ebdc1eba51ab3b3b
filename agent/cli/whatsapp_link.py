"""``watchkeeper whatsapp link``: link an account by QR code or pairing code.

Uses the same session file as the running channel (``DATA_DIR/whatsapp.sqlite3``)
and exits once WhatsApp reports the session connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import Callable
from typing import Any

from agent.config import Settings
from storage.repos.whatsapp_permissions import normalise_phone

Printer = Callable[[str], None]
LINK_TIMEOUT = 300.0


def qr_text(data: bytes | str) -> str:
    """A QR code as terminal text (segno ships with neonize)."""
    import segno

    out = io.StringIO()
    segno.make_qr(data).terminal(out=out, compact=True)
    return out.getvalue()


def _default_client(path: str) -> Any:
    from neonize.aioze.client import NewAClient

    return NewAClient(path)


def _print(text: str) -> None:
    print(text, flush=True)


async def link(
    settings: Settings,
    phone: str | None,
    *,
    client_factory: Callable[[str], Any] = _default_client,
    out: Printer = _print,
    wait_seconds: float = LINK_TIMEOUT,
) -> int:
    """0 once linked; 2 for a bad ``--phone``; 1 when linking failed or timed out."""
    digits = None
    if phone is not None:
        number = normalise_phone(phone)
        if number is None:
            print(f"watchkeeper: --phone must be an E.164 number, got {phone!r}", file=sys.stderr)
            return 2
        digits = number.lstrip("+")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from neonize.aioze.events import ConnectedEv

    client = client_factory(str(settings.whatsapp_session_path))
    connected = asyncio.Event()
    paired: list[str] = []

    async def on_connected(_client: Any, _ev: Any) -> None:
        connected.set()

    async def on_qr(_client: Any, data: bytes) -> None:
        if digits is None:
            out("Scan this with WhatsApp > Linked devices > Link a device:\n" + qr_text(data))
        elif not paired:
            # A pairing code can be asked for once the server offered a QR.
            paired.append(await client.PairPhone(digits, show_push_notification=True))
            out(f"Pairing code: {paired[0]}\nWhatsApp > Linked devices > Link with phone number.")

    client.event(ConnectedEv)(on_connected)
    client.event.qr(on_qr)
    session = await client.connect()
    waiter = asyncio.create_task(connected.wait())
    watched = [waiter, session] if isinstance(session, asyncio.Future) else [waiter]
    await asyncio.wait(watched, timeout=wait_seconds, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    ok = connected.is_set()
    with contextlib.suppress(Exception):
        await client.disconnect()
    out("WhatsApp linked." if ok else "WhatsApp was not linked (timed out or failed).")
    return 0 if ok else 1
