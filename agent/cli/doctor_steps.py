"""``doctor``'s owner section and its closing "next:" lines, one per missing step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pymongo.asynchronous.database import AsyncDatabase

from agent.config import Settings
from agent.context import system_clock
from storage.pairing import PairedOwner, PairingStore, PendingCode


class Checked(Protocol):
    name: str
    ok: bool
    detail: str


@dataclass
class Owners:
    """Who owns the bot on Telegram, as the database says (``loaded`` once read)."""

    paired: list[PairedOwner] = field(default_factory=list)
    pending: list[PendingCode] = field(default_factory=list)
    loaded: bool = False

    async def load(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        store = PairingStore(db, system_clock)
        self.paired, self.pending = await store.owners(), await store.pending()
        self.loaded = True


def owner_detail(settings: Settings, owners: Owners) -> tuple[bool, str]:
    """The ``owner`` line: (ok, text)."""
    known = [f"{i} (OWNER_TELEGRAM_IDS)" for i in settings.owner_telegram_ids]
    known += [
        f"{o.who()}, paired" for o in owners.paired if o.user_id not in settings.owner_telegram_ids
    ]
    if known:
        return True, "Telegram: " + ", ".join(known)
    if not owners.loaded:
        return False, "Telegram: none in OWNER_TELEGRAM_IDS (paired owners unknown: no database)"
    if owners.pending:
        return False, "Telegram: none yet; " + "; ".join(p.command() for p in owners.pending)
    return False, "Telegram: none yet (no OWNER_TELEGRAM_IDS, nobody paired)"


def next_steps(settings: Settings, checks: Sequence[Checked], owners: Owners) -> list[str]:
    """What to do next, one line each, most urgent first; empty when nothing is missing."""
    failed = {c.name: c.detail for c in checks if not c.ok}
    steps: list[str] = []
    if "database" in failed:
        where = "MONGODB_URI" if settings.mongodb_uri else "DATA_DIR (embedded database)"
        steps.append(f"fix the database: {failed['database']} (check {where})")
    if settings.llm_provider is None:
        steps.append(
            "put a model key in .env: OPENAI_API_KEY=sk-... (or GEMINI_API_KEY=...), "
            "then start again"
        )
    elif "model" in failed:
        steps.append(
            f"the model does not answer ({failed['model']}): check the key and base URL "
            f"of {settings.llm_provider.upper()}_API_KEY / {settings.llm_provider.upper()}_BASE_URL"
        )
    telegram = settings.telegram_bot_token is not None
    if not telegram and not settings.whatsapp_enabled and not settings.twilio_account_sid:
        steps.append(
            "to chat from your phone, set TELEGRAM_BOT_TOKEN (from @BotFather on Telegram); "
            "meanwhile `watchkeeper chat` talks in the terminal"
        )
    has_owner = bool(settings.owner_telegram_ids or owners.paired)
    if telegram and not has_owner:
        if owners.pending:
            steps.extend(p.command() for p in owners.pending)
        else:
            steps.append(
                "with `watchkeeper run` up, write to your bot on Telegram, then run "
                "`watchkeeper pair CODE` with the code it answers"
            )
    if settings.twilio_account_sid and not settings.public_base_url:
        steps.append(
            "set PUBLIC_BASE_URL to this server's public https URL, so Twilio's webhook "
            "(inbound SMS) is accepted"
        )
    if settings.whatsapp_enabled and not settings.whatsapp_session_path.exists():
        steps.append("link WhatsApp: run `watchkeeper whatsapp link` and scan the QR code")
    return steps
