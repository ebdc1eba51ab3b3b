"""The tests' SecantusDB servers create a collection under that collection's lock, so a
write creating it at the same moment cannot deadlock with it.

The test servers run SecantusDB's default, a one-node replica set, which keeps an oplog.
There an insert into a collection that does not exist yet takes the collection's lock,
opens its write transaction, writes the collection's catalogue row
(``Storage._ensure_collection``) and then waits for the storage lock to mint the
collection's id for its oplog entry. ``create_collection`` (the ``create`` command, and
``createIndexes`` on a missing collection) takes the storage lock alone and writes the
same catalogue row, which WiredTiger keeps for the insert's open transaction. Each
waits for the other, for good, and every later writer queues behind them. Measured on
SecantusDB 0.7.0b3: an insert and a ``create`` or ``createIndex`` on one new collection
at once hung the server on the first try; patched, 400 rounds of each ran. A test that
happened to race like that hung the whole suite (2a2abc0).

The embedded server ``watchkeeper run`` starts is a standalone node
(``storage/embedded_server.py``): without an oplog an insert never mints an id under the
storage lock, so it is not affected (50 rounds of the race against it, unpatched, all
finished). Here ``create_collection`` and ``set_collection_options`` take the
collection's lock first, SecantusDB's own lock order: a racing insert finishes, then the
creation finds the collection there (``create`` answers NamespaceExists, as MongoDB does).

SecantusDB is pinned (``pyproject.toml``); ``patch`` refuses a version without the
methods it wraps rather than run half-patched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from storage.embedded_catalog import patch_once

_MARK = "_watchkeeper_ddl_lock_order"
WRAPPED = ("create_collection", "set_collection_options")
NEEDED = ("_coll_lock", *WRAPPED)


def _under_collection_lock(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(storage: Any, db: str, coll: str, *args: Any, **kwargs: Any) -> Any:
        with storage._coll_lock(db, coll):
            return method(storage, db, coll, *args, **kwargs)

    return wrapper


def patch(storage_class: Any) -> bool:
    """Wrap ``storage_class``'s collection creation; False if it was already done."""

    def apply() -> None:
        for name in WRAPPED:
            setattr(storage_class, name, _under_collection_lock(getattr(storage_class, name)))

    return patch_once(storage_class, _MARK, NEEDED, apply)


def create_collections_in_lock_order() -> bool:
    """Patch SecantusDB's ``Storage`` in this process (the test servers)."""
    from secantus.storage import Storage

    return patch(Storage)
