"""The embedded database reads a collection's index catalogue once per write, not per document.

SecantusDB keeps index definitions in a WiredTiger table, and for every document it
writes it reads that table back and decodes each definition several times
(``Storage._index_options_map``: for the duplicate-key check, the geo check, the index
entries written and those deleted). In a burst that was about a quarter of the
database's CPU per message (``bench/profile_burst.py``: 4.6-5.0 -> 3.4-3.8 ms).

Every insert, update and delete writes inside one WiredTiger snapshot transaction
(``Storage._batch_transaction``; DDL never does). Within it a re-read returns what the
first read returned, except for the transaction's own catalogue writes, and the only
one a write makes is flagging an index multikey (``_maybe_mark_multikey``, asked for
every document). So for the length of that transaction the first read is kept, per
thread, and an index newly flagged forgets it. Outside a write transaction every read
goes to the table as before.

SecantusDB is pinned (``pyproject.toml``); ``patch`` checks that the methods it wraps
still exist and refuses otherwise, so an upgrade cannot silently run unpatched code
paths half-wrapped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

OptionsMap = dict[str, dict[str, Any]]
_MARK = "_watchkeeper_catalogue_memo"
NEEDED = ("_batch_transaction", "_index_options_map", "_maybe_mark_multikey")


class CatalogueMemo:
    """The per-thread memo and the three wrappers that keep and forget it."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _memo(self) -> dict[tuple[int, str, str], OptionsMap] | None:
        memo: dict[tuple[int, str, str], OptionsMap] | None = getattr(self._local, "memo", None)
        return memo

    def transaction(self, begin: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def batch_transaction(storage: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            if self._memo() is not None:  # already inside one: it keeps the memo
                with begin(storage, *args, **kwargs) as session:
                    yield session
                return
            self._local.memo = {}
            try:
                with begin(storage, *args, **kwargs) as session:
                    yield session
            finally:
                self._local.memo = None

        return batch_transaction

    def options_map(self, read: Callable[..., OptionsMap]) -> Callable[..., OptionsMap]:
        def index_options_map(storage: Any, db: str, coll: str) -> OptionsMap:
            memo = self._memo()
            if memo is None:
                return read(storage, db, coll)
            key = (id(storage), db, coll)
            found = memo.get(key)
            if found is None:
                found = memo[key] = read(storage, db, coll)
            # A fresh copy each time, as the original returns: no caller can alter the memo.
            return {name: dict(options) for name, options in found.items()}

        return index_options_map

    def forgetting(self, mark: Callable[..., set[str]]) -> Callable[..., set[str]]:
        def mark_multikey(
            storage: Any, db: str, coll: str, doc: Any, indexes: Any, already: set[str]
        ) -> set[str]:
            before = len(already)
            marked = mark(storage, db, coll, doc, indexes, already)
            memo = self._memo()
            if memo is not None and len(marked) > before:  # it may have flagged one
                memo.clear()
            return marked

        return mark_multikey


def patch_once(
    storage_class: Any, mark: str, needed: Sequence[str], apply: Callable[[], None]
) -> bool:
    """Run ``apply`` (which patches ``storage_class``) once: False if ``mark`` says it
    ran. A SecantusDB without every method in ``needed`` is refused, not half-patched."""
    if getattr(storage_class, mark, False):
        return False
    missing = [name for name in needed if not callable(getattr(storage_class, name, None))]
    if missing:
        raise RuntimeError(f"SecantusDB changed: {', '.join(missing)} no longer there")
    apply()
    setattr(storage_class, mark, True)
    return True


def patch(storage_class: Any) -> bool:
    """Wrap ``storage_class``'s catalogue reads; False if it was already done."""
    memo = CatalogueMemo()

    def apply() -> None:
        storage_class._batch_transaction = memo.transaction(storage_class._batch_transaction)
        storage_class._index_options_map = memo.options_map(storage_class._index_options_map)
        storage_class._maybe_mark_multikey = memo.forgetting(storage_class._maybe_mark_multikey)

    return patch_once(storage_class, _MARK, NEEDED, apply)


def read_catalogue_once_per_write() -> bool:
    """Patch SecantusDB's ``Storage`` in this process (the embedded server, the tests')."""
    from secantus.storage import Storage

    return patch(Storage)
