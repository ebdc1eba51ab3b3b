"""Watching photo decodes: which started and ended, in order, as the decoder ran them.

``DecodeRecorder`` wraps ``prepare_image`` (the decoder's ``decode``): it records each
decode's start and end from the worker thread, and holds the first at its start until
the test releases it, so the other photos are handed to the decoder while one is being
decoded. ``WatchedDecoder`` records when each photo was handed over.
"""

from __future__ import annotations

import itertools
import threading

from agent.llm.images import ImageDecoder, OversizedImage, PreparedImage, prepare_image
from tests.waiting import WATCHDOG

Event = tuple[str, int]


class DecodeRecorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.release = threading.Event()
        self._numbers = itertools.count()

    def __call__(
        self, data: bytes, max_edge: int, *, max_pixels: int
    ) -> PreparedImage | OversizedImage | None:
        number = next(self._numbers)
        self.events.append(("start", number))
        try:
            if number == 0 and not self.release.wait(WATCHDOG):
                raise AssertionError("the first decode was never released")
            return prepare_image(data, max_edge, max_pixels=max_pixels)
        finally:
            self.events.append(("end", number))

    def most_at_once(self) -> int:
        """The most decodes that were running at the same time."""
        running = most = 0
        for kind, _number in self.events:
            running += 1 if kind == "start" else -1
            most = max(most, running)
        return most


class WatchedDecoder(ImageDecoder):
    """An ``ImageDecoder`` that counts the photos handed to it."""

    def __init__(self, decode: DecodeRecorder) -> None:
        super().__init__(decode=decode)
        self.asked = 0

    async def prepare(
        self, data: bytes, max_edge: int, *, max_pixels: int
    ) -> PreparedImage | OversizedImage | None:
        self.asked += 1
        return await super().prepare(data, max_edge, max_pixels=max_pixels)
