"""Callbacks a part calls when something changes, registered while the app is assembled.

As aiohttp's signals (``on_startup``, ``cleanup_ctx``: a ``FrozenList``): the
composition root registers every listener in one pass, then freezes the list; a
registration after that raises, so nothing is wired into a part that already runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

F = TypeVar("F")


class Listeners(Generic[F]):
    """The listeners of one kind of change, in the order they were registered."""

    def __init__(self) -> None:
        self._items: list[F] = []
        self._frozen = False

    def append(self, listener: F) -> None:
        if self._frozen:
            raise RuntimeError("listeners are fixed once the app is assembled; register earlier")
        self._items.append(listener)

    def freeze(self) -> None:
        """No more listeners: the app is assembled."""
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    def __iter__(self) -> Iterator[F]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, listener: object) -> bool:
        return listener in self._items
