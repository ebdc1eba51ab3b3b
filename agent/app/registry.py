"""The channel registry: one entry per channel, and the only place that names them all.

An entry (``ChannelEntry``) holds everything the app knows of a channel: its rules
(``channels.registry.ChannelRules``: whether the settings set it up, who the owner is
there, how alerts and replies reach them) and its factory, which builds the channel
(not yet started) with the HTTP routes it mounts and the feature that gives the agent
its parts (``Built``). A channel is built one of two ways:

* ``early``: from the settings alone, started before the database opens, so its first
  long poll is out while the rest starts (Telegram);
* ``late``: once the database is open (``ChannelSetup``), for a channel that needs it
  (WhatsApp's permissions, the SMS budget).

Both are built before the outbox and the pipeline, which get the finished mapping of
channels: nothing joins it later. A channel with neither is passed to ``build_app``
ready-made (the terminal of ``watchkeeper chat``); its entry still gives its rules.
Adding a channel: a package under ``channels/`` and one entry here (or in the registry
a caller passes to ``build_app``).

This module is imported before the channels start: it imports no channel and no
feature until an entry is used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.app.application import TELEGRAM_WEBHOOK, Built, ChannelSetup, Route
from agent.config import Settings
from agent.reach import Owners, Reach, Rules
from channels.registry import ChannelName, Delivery

if TYPE_CHECKING:
    from agent.reach import HasStatus
    from channels.whatsapp import ClientFactory

log = logging.getLogger(__name__)


Early = Callable[[Settings], Built]
Late = Callable[[ChannelSetup], "Built | None"]
"""None: the channel is not built here (WhatsApp under ``watchkeeper chat``)."""


@dataclass(frozen=True)
class ChannelEntry:
    """One channel: its rules, and how it is built (``early`` or ``late``; neither for
    a channel the caller builds, such as the terminal). Each is called only when the
    rules say the settings set the channel up."""

    rules: Rules
    early: Early | None = None
    late: Late | None = None
    preload: tuple[str, ...] = ()
    """Modules an ``early`` channel needs, imported in a thread while the event loop
    stays free (a channel's SDK costs memory: only when the channel is set up)."""

    @property
    def name(self) -> str:
        return self.rules.name


# --- the rules of the built-in channels ----------------------------------------------


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class TelegramRules:
    """Owners: ``OWNER_TELEGRAM_IDS`` and the ids paired in the database (``Owners``);
    alerts carry buttons."""

    name: str = ChannelName.TELEGRAM
    delivery: Delivery = field(default_factory=lambda: Delivery(buttons=True))

    def configured(self, settings: Settings) -> bool:
        return settings.telegram_bot_token is not None

    def unconfigured(self) -> str:
        return "Telegram is not set up here (TELEGRAM_BOT_TOKEN)"

    def owner_address(self, owners: Owners) -> str | None:
        ids = owners.telegram_ids  # configured first, then paired
        return str(ids[0]) if ids else None

    def no_owner(self) -> str:
        return "Telegram knows no owner yet (OWNER_TELEGRAM_IDS, or watchkeeper pair)"

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: Owners) -> bool:
        return _as_int(sender_id) in owners.telegram_ids


@dataclass(frozen=True)
class WhatsAppRules:
    """Owner: ``OWNER_PHONE``, or the "message yourself" chat; contacts are known to the
    feature's resolver (``agent.app.features.whatsapp``)."""

    name: str = ChannelName.WHATSAPP
    delivery: Delivery = field(default_factory=lambda: Delivery(unquoted_replies=True))

    def configured(self, settings: Settings) -> bool:
        return settings.whatsapp_enabled

    def unconfigured(self) -> str:
        return "WhatsApp is not set up here (WHATSAPP_ENABLED)"

    def owner_address(self, owners: Owners) -> str | None:
        return owners.phone

    def no_owner(self) -> str:
        return "OWNER_PHONE is not set, so WhatsApp has no owner to write to"

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: Owners) -> bool:
        if meta.get("self_chat") and not meta.get("is_group"):
            return True
        return bool(owners.phone) and sender_id == owners.phone


SMS_WHOLE_TEXT = 1600
"""Twilio refuses a longer body; ``channels.sms`` cuts there."""


@dataclass(frozen=True)
class SmsRules:
    """Owner: ``OWNER_PHONE``. Not a chat: alert pages and calls go here, chat copies
    only when the owner made it their ``primary_channel``."""

    name: str = ChannelName.SMS
    delivery: Delivery = field(
        default_factory=lambda: Delivery(
            chat=False, whole_text=SMS_WHOLE_TEXT, pages=True, unquoted_replies=True
        )
    )

    def configured(self, settings: Settings) -> bool:
        twilio = (settings.twilio_account_sid, settings.twilio_auth_token)
        return all(twilio) and bool(settings.twilio_from_number)

    def unconfigured(self) -> str:
        return "SMS is not set up here (TWILIO_* settings)"

    def owner_address(self, owners: Owners) -> str | None:
        return owners.phone

    def no_owner(self) -> str:
        return "OWNER_PHONE is not set, so SMS has no owner to write to"

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: Owners) -> bool:
        return bool(owners.phone) and sender_id == owners.phone


@dataclass(frozen=True)
class ConsoleRules:
    """The terminal: whoever types there is the owner."""

    name: str = ChannelName.CONSOLE
    delivery: Delivery = field(default_factory=Delivery)

    def configured(self, settings: Settings) -> bool:
        return False  # only ``watchkeeper chat`` runs it, passing it in

    def unconfigured(self) -> str:
        return "the terminal runs only in `watchkeeper chat`"

    def owner_address(self, owners: Owners) -> str | None:
        return "owner"

    def no_owner(self) -> str:
        return ""

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: Owners) -> bool:
        return True


# --- how the built-in channels start -----------------------------------------------


def telegram_channel(settings: Settings) -> Built:
    """The Bot API channel; its webhook route when ``TELEGRAM_WEBHOOK_URL`` is set."""
    from agent.conversation.commands import COMMAND_HELP
    from channels.telegram import TelegramChannel

    assert settings.telegram_bot_token is not None  # checked by TelegramRules.configured
    secret = settings.telegram_webhook_secret
    telegram = TelegramChannel(
        token=settings.telegram_bot_token.get_secret_value(),
        base_url=settings.telegram_api_base_url,
        webhook_url=settings.telegram_webhook_url,
        webhook_secret=secret.get_secret_value() if secret else None,
        commands=list(COMMAND_HELP.items()),
        read_timeout=settings.http_read_timeout_seconds,
        media_max_bytes=settings.media_max_bytes,
    )
    routes: list[Route] = []
    if settings.telegram_webhook_url:
        routes.append(("POST", TELEGRAM_WEBHOOK, telegram.handle_webhook))
    return Built(telegram, routes)


SMS_WEBHOOK = "/webhooks/twilio/sms"


def sms_channel(setup: ChannelSetup) -> Built:
    """The Twilio channel and its webhook; every SMS takes from the one hourly budget.
    (Its calls' webhook is mounted by the alert router's feature, which answers it.)"""
    from channels.sms import SmsChannel
    from storage.repos.sms_budget import take_sms

    settings, clock, db = setup.settings, setup.clock, setup.database.db
    assert settings.twilio_auth_token is not None  # checked by SmsRules.configured
    sms = SmsChannel(
        settings.twilio_account_sid or "",
        settings.twilio_auth_token.get_secret_value(),
        settings.twilio_from_number or "",
        api_base_url=settings.twilio_api_base_url,
        public_base_url=settings.public_base_url,
        read_timeout=settings.http_read_timeout_seconds,
        clock=clock,
        budget=lambda: take_sms(db, clock(), settings.sms_per_hour),
        segment_seconds=1 / settings.twilio_segments_per_second,
    )
    if not settings.owner_phone:
        log.warning("sms: OWNER_PHONE is not set, so no SMS alerts can be sent")
    if not settings.public_base_url:
        log.warning(
            "sms: PUBLIC_BASE_URL is not set, so inbound SMS are refused (their signatures "
            "cannot be checked); set it to the public URL Twilio calls"
        )
    return Built(sms, (("POST", SMS_WEBHOOK, sms.handle_webhook),))


def whatsapp_entry(client_factory: ClientFactory | None = None, **options: Any) -> ChannelEntry:
    """WhatsApp; tests pass a fake ``client_factory`` and short timings
    (``agent.app.features.whatsapp.whatsapp_channel``)."""

    def late(setup: ChannelSetup) -> Built | None:
        from agent.app.features.whatsapp import whatsapp_channel

        return whatsapp_channel(setup, client_factory, **options)

    return ChannelEntry(WhatsAppRules(), late=late)


TELEGRAM = ChannelEntry(
    TelegramRules(),
    early=telegram_channel,
    preload=("channels.telegram", "agent.conversation.commands"),  # and the command menu
)
WHATSAPP = whatsapp_entry()
SMS = ChannelEntry(SmsRules(), late=sms_channel)
CONSOLE = ChannelEntry(ConsoleRules())

REGISTRY: tuple[ChannelEntry, ...] = (TELEGRAM, WHATSAPP, SMS, CONSOLE)
"""Every channel, in the owner's preference order for chats (alerts, notices)."""


def replaced(registry: Iterable[ChannelEntry], *entries: ChannelEntry) -> tuple[ChannelEntry, ...]:
    """``registry`` with ``entries`` in place of those of the same name, the new ones
    appended (a test's fake WhatsApp client, a test-only channel)."""
    given = {entry.name: entry for entry in entries}
    kept = [given.pop(entry.name, entry) for entry in registry]
    return (*kept, *given.values())


def reach(
    owners: Owners,
    running: Mapping[str, HasStatus],
    registry: Iterable[ChannelEntry] = REGISTRY,
) -> Reach:
    """The owner's reach over ``running`` by the rules of ``registry``; who the owner
    is, by ``owners``."""
    return Reach(owners, (entry.rules for entry in registry), running)
