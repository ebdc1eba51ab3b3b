"""Telegram's flood limits, and the pace that keeps a bot's sends within them.

The Bot API FAQ publishes them: about 30 messages a second from one bot, no more than
one a second in one chat, and 20 a minute in one group. Going past them gets 429
("Too Many Requests: retry after N"), so each send waits its turn first
(``channels.pacing``): the chat's lane (its messages in order, a second apart), the
group's window when the chat is a group, then the bot's window.

Group chats, supergroups and channels have negative ids (``@name`` for a public
channel); private chats positive ones, which is all the sender knows about a chat.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.pacing import Pace, Window


@dataclass(frozen=True)
class FloodLimits:
    """Telegram's published limits by default; a test may shrink them to run fast."""

    per_bot: int = 30
    bot_period: float = 1.0
    chat_gap: float = 1.0
    """Seconds between two messages in one chat."""
    per_group: int = 20
    group_period: float = 60.0


TELEGRAM_LIMITS = FloodLimits()


def is_group(chat_id: str) -> bool:
    """Whether ``chat_id`` names a group, supergroup or channel rather than a person."""
    return chat_id.startswith(("-", "@"))


class FloodPace(Pace):
    """A bot's lanes: each chat's own, taking a place in its group's window when it is
    a group, then in the bot's."""

    def __init__(self, limits: FloodLimits = TELEGRAM_LIMITS) -> None:
        super().__init__()
        self.limits = limits
        self._bot = self.shared(limits.per_bot, limits.bot_period)

    def windows_for(self, key: str) -> tuple[Window, ...]:
        if not is_group(key):
            return (self._bot,)
        group = self.window(key, self.limits.per_group, self.limits.group_period)
        return group, self._bot
