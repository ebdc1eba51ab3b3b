"""The names of the channels, and what every channel's registry entry tells the agent.

``ChannelName`` is the one spelling of each built-in channel (a ``StrEnum``: stored
values, settings and ``DESIGN.md`` keep the plain strings). ``ChannelRules`` is the part
of a channel's entry the agent reads without starting or importing the channel: whether
the settings set it up, who its owner is (by the agent's record of the owners, paired
ones included), and how messages reach the owner there (``Delivery``). The entries
themselves, with the factory and the HTTP routes of each channel, live in the
composition root (``agent.app.registry``): the agent never imports a concrete channel
outside it.

A channel the project does not ship (a test's) has no ``ChannelName`` member: every
field that holds a channel's name is a ``str``, and the registry entry alone brings it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar


class ChannelName(StrEnum):
    """The built-in channels, as stored (``inbox.channel``, ``outbox.channel``...)."""

    TELEGRAM = "telegram"
    WHATSAPP = "whatsapp"
    SMS = "sms"
    CONSOLE = "console"


@dataclass(frozen=True)
class Delivery:
    """How what the agent sends reaches the owner on a channel."""

    chat: bool = True
    """The owner chats here: alert copies, notices and deliveries may go here. A channel
    that is not a chat (SMS) is used for them only as the owner's ``primary_channel``."""
    buttons: bool = False
    """Alerts and held-call questions carry answer buttons (Ack, Approve...) here, and a
    press comes back as an ``InboundMessage`` of kind ``PRESSED``."""
    whole_text: int | None = None
    """The longest text sent whole, where the channel cuts a longer one (Twilio refuses
    more than 1,600 characters); a text that must arrive whole is split before it is
    queued. None: the channel sends any length itself."""
    pages: bool = False
    """Alert pages go here (within the hourly SMS budget), and the phone calls of a
    critical alert ring through it."""
    unquoted_replies: bool = False
    """Replies here never say which message they answer (SMS, WhatsApp): a short "k"
    answers the alert last sent to the chat, when nothing was sent there since."""


S = TypeVar("S", contravariant=True)
W = TypeVar("W", contravariant=True)


class ChannelRules(Protocol[S, W]):
    """What the agent knows of a channel without starting it: from the settings ``S``,
    whether it is set up; from who the owner is, ``W`` (the agent's ``Owners``: the
    settings' owners and those paired in the database), the owner's address there and
    whether a sender is the owner."""

    @property
    def name(self) -> str: ...

    @property
    def delivery(self) -> Delivery: ...

    def configured(self, settings: S) -> bool:
        """Whether the settings set the channel up (``watchkeeper run`` starts it)."""
        ...

    def unconfigured(self) -> str:
        """Why the channel is not set up, naming the settings that would set it up."""
        ...

    def owner_address(self, owners: W) -> str | None:
        """The owner's chat id here, or None when no owner is known here."""
        ...

    def no_owner(self) -> str:
        """Why ``owner_address`` is None, naming what would give one."""
        ...

    def is_owner(self, sender_id: str, meta: Mapping[str, Any], owners: W) -> bool:
        """Whether a message from ``sender_id`` (with the transport's ``meta``) is the
        owner's. A contact is known only to the channel's own resolver, which reads
        the database (WhatsApp's permissions)."""
        ...
