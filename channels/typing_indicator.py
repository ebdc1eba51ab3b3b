"""The "typing..." indicator while a reply is being made, sparingly.

Nothing for a reply faster than ``after`` (it would only flash); then one action per
chat every ``every`` seconds (Telegram shows one for 5 s), shared by consecutive
messages of the same chat, so a burst of them does not send one each. A channel
whose indicator costs nothing (the terminal) says so with its own ``typing_after``.
Time comes from ``clock`` (monotonic seconds) and ``sleep``, so a test can move it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from channels.types import Channel

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[object]]
TYPING_AFTER = 1.0
TYPING_EVERY = 4.5
TYPED_KEEP = 512
"""Chats whose last action is remembered before the expired ones are dropped."""


class TypingIndicator:
    def __init__(
        self,
        channels: Mapping[str, Channel],
        after: float = TYPING_AFTER,
        every: float = TYPING_EVERY,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._channels = channels
        self.after = after
        self.every = every
        self._clock = clock
        self._sleep = sleep
        self._typed: dict[tuple[str, str], float] = {}
        """When each (channel, chat) last got an action, by ``clock``."""

    async def keep_typing(self, channel_name: str, chat_id: str) -> None:
        """Show "typing..." in the chat until cancelled (after ``after`` seconds)."""
        channel = self._channels.get(channel_name)
        if channel is None:
            return
        await self._sleep(getattr(channel, "typing_after", self.after))
        chat = (channel_name, chat_id)
        while True:
            now = self._clock()
            last = self._typed.get(chat)
            if last is not None and now - last < self.every:
                await self._sleep(self.every - (now - last))
                continue
            self._typed[chat] = now
            if len(self._typed) > TYPED_KEEP:
                self._typed = {k: t for k, t in self._typed.items() if now - t < self.every}
            try:
                await channel.typing(chat_id)
            except Exception:
                log.debug("typing indicator failed", exc_info=True)
            await self._sleep(self.every)
