"""Who the owner is and where they are reached: one answer for cron delivery, notices,
``send_message``, alert routing and who counts as the owner, by each channel's own rules.

Who: ``Owners``, the environment's ``OWNER_TELEGRAM_IDS`` and ``OWNER_PHONE`` and the
Telegram owners paired with ``watchkeeper pair``, which live in the database (kept in
memory between reads). Each channel's rules read it, so a Telegram owner paired in
another process is reached and trusted like one in ``OWNER_TELEGRAM_IDS``.

The rules come from the channels' registry entries (``channels.registry.ChannelRules``,
assembled in ``agent.app.registry``); nothing here names a channel, so a channel added
to the registry is reached, trusted and alerted like the built-in ones. The order of
the rules is the preference order of the owner's chats.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from agent.config import Settings
from channels.registry import ChannelName, ChannelRules, Delivery

if TYPE_CHECKING:  # the database's modules load after the channels' (``agent.app.core``)
    from storage.repos.pairing import PairedOwner, PairingStore

PRIMARY_CHOICES = (ChannelName.TELEGRAM, ChannelName.WHATSAPP, ChannelName.SMS)
"""The channels ``manage_settings`` offers as ``primary_channel`` (``DESIGN.md``)."""
FALLBACK = ChannelName.CONSOLE
"""Where a delivery goes when no chat reaches the owner: the terminal, where it is at
least logged."""
NO_RULES = Delivery()


class HasStatus(Protocol):
    def status(self) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class Target:
    """One place to reach the owner."""

    channel: str
    chat_id: str


def is_up(channel: HasStatus) -> bool:
    """What a channel's ``status()`` says about being connected (unknown counts as up)."""
    try:
        return bool(channel.status().get("connected", True))
    except Exception:
        return False


class Owners:
    """Who the owner is: the settings' ``OWNER_TELEGRAM_IDS`` and ``OWNER_PHONE``, and
    the Telegram owners paired in the database. The paired ones are read by ``refresh``
    (at start, every ``agent.conversation.pairing.REFRESH_EVERY``, and when an unknown
    Telegram user writes: ``watchkeeper pair`` runs in another process); between reads
    this process answers from the last one. ``Settings`` is never written: it stays
    what the environment said."""

    def __init__(self, settings: Settings, store: PairingStore | None = None) -> None:
        """``store``: where paired owners are kept; None knows only the settings' owners
        (a part built alone, in a test)."""
        self.settings = settings
        self.store = store
        self._paired: tuple[int, ...] = ()

    @property
    def telegram_ids(self) -> list[int]:
        """Every Telegram owner: ``OWNER_TELEGRAM_IDS``, then those paired in the database."""
        configured = self.settings.owner_telegram_ids
        return [*configured, *(i for i in self._paired if i not in configured)]

    @property
    def phone(self) -> str | None:
        """The owner's number (``OWNER_PHONE``): SMS, WhatsApp and calls."""
        return self.settings.owner_phone

    async def refresh(self) -> list[PairedOwner]:
        """Read the paired owners again; returns them (oldest first)."""
        if self.store is None:
            return []
        owners = await self.store.owners()
        self._paired = tuple(owner.user_id for owner in owners)
        return owners


Rules: TypeAlias = ChannelRules[Settings, Owners]
"""A channel's rules as the agent reads them: set up by the ``Settings``; its owner by
the ``Owners``."""


class Reach:
    """The owner's addresses and trust on every registered channel, over the running
    ones (``running``: the composition root's mapping of channels by name). Built once;
    the rules are kept in preference order. ``owners``: who the owner is, kept current
    by its own ``refresh`` (paired owners live in the database)."""

    def __init__(
        self,
        owners: Owners,
        rules: Iterable[Rules],
        running: Mapping[str, HasStatus] | None = None,
    ) -> None:
        self.owners = owners
        self._by_name: Mapping[str, Rules] = MappingProxyType({rule.name: rule for rule in rules})
        self.running: Mapping[str, HasStatus] = running if running is not None else {}

    def names(self) -> list[str]:
        """Every registered channel, in preference order."""
        return list(self._by_name)

    def delivery(self, channel: str) -> Delivery:
        rule = self._by_name.get(channel)
        return rule.delivery if rule is not None else NO_RULES

    def address(self, channel: str) -> str | None:
        """The owner's chat id on ``channel``, or None when no owner is known there."""
        rule = self._by_name.get(channel)
        return rule.owner_address(self.owners) if rule is not None else None

    def is_owner(self, channel: str, sender_id: str, meta: Mapping[str, Any]) -> bool:
        """Whether a message on ``channel`` from ``sender_id`` is the owner's."""
        rule = self._by_name.get(channel)
        return rule is not None and rule.is_owner(sender_id, meta, self.owners)

    def pager(self) -> Target | None:
        """Where an alert page goes: the running channel that pages (SMS), when the
        owner has an address there."""
        for name, rule in self._by_name.items():
            if rule.delivery.pages and name in self.running:
                address = rule.owner_address(self.owners)
                if address is not None:
                    return Target(name, address)
        return None

    def can_page(self) -> bool:
        """Whether a page can go at all: a paging channel runs and the owner has a number."""
        return self.pager() is not None

    def chats(self, primary: str | None = None) -> list[Target]:
        """The owner's chats on the running channels, in preference order; channels that
        say they are down go last (a "WhatsApp is logged out" notice must not wait in
        WhatsApp's own queue while Telegram is up).

        ``primary`` (the owner's ``primary_channel``, ``manage_settings``) goes first when
        it is running and has an owner address; a channel that is not a chat (SMS)
        counts as one only then."""
        order = [name for name, rule in self._by_name.items() if rule.delivery.chat]
        if primary:
            order = [primary, *(name for name in order if name != primary)]
        found = [
            Target(name, address)
            for name in order
            if name in self.running and (address := self.address(name)) is not None
        ]
        found.sort(key=lambda target: not is_up(self.running[target.channel]))  # stable
        return found

    def chat(self, *, avoid: str | None = None, primary: str | None = None) -> Target:
        """The owner's main chat: the first of ``chats`` (other than ``avoid``), or the
        terminal, where a delivery is at least logged."""
        for target in self.chats(primary):
            if target.channel != avoid:
                return target
        return Target(FALLBACK, "owner")

    def unreachable(self, channel: str) -> str | None:
        """Why the owner cannot be reached on ``channel``, or None when it runs here or
        is set up (``watchkeeper chat`` runs only the terminal, beside a ``watchkeeper
        run`` that has the rest) and has the owner's address."""
        rule = self._by_name.get(channel)
        if rule is None:
            return f"{channel} is not a channel"
        if channel not in self.running and not rule.configured(self.owners.settings):
            return rule.unconfigured()
        if rule.owner_address(self.owners) is None:
            return rule.no_owner()
        return None

    def primary_choices(self) -> list[str]:
        """The ``primary_channel`` choices that can work: set up, with an owner address."""
        return [name for name in PRIMARY_CHOICES if self.unreachable(name) is None]
