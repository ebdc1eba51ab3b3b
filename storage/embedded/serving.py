"""Opening, publishing and stopping one SecantusDB server: what the server needs
wherever it runs, in the agent's process (``storage.embedded.inprocess``, the default)
or in a process of its own (``storage.embedded.server``).

Nothing here imports SecantusDB at module level: ``open_server`` does, so that the
owner can decide where the import happens (a thread of the agent, or the child).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PIPELINE_DOCS = 200_000
"""Documents one aggregation stage may hold (SecantusDB's default: 5,000,000): a
runaway pipeline fails alone instead of holding the machine's memory."""
KNOCK_EVERY = 0.05
"""Seconds between the connections that wake the accept thread at stop."""


class StoreBusy(RuntimeError):
    """Another process has the store open (WiredTiger reports EBUSY)."""


@dataclass(frozen=True)
class ServerOptions:
    """How the embedded server is opened: the same wherever it runs."""

    storage_path: Path
    client_idle_timeout: float = 300.0
    ttl_sweep_seconds: float = 30.0
    test_commands: bool = False
    cache_size: str = "256M"
    sync_on_commit: bool = False
    """Each commit waits for its journal record to reach the disk (fsync). Without it
    WiredTiger writes the journal from a thread of its own a moment later, so a process
    killed with SIGKILL loses what it committed in the last ~0.1 s: a server in the
    agent's process dies with the agent, so there it is on (``inprocess``); a server in
    a process of its own outlives its owner's death and closes the store cleanly."""


def _is_busy(exc: BaseException) -> bool:
    """WiredTiger refusing a store another process has open (it reports EBUSY)."""
    return os.strerror(errno.EBUSY) in str(exc)


def open_server(options: ServerOptions) -> Any:
    """A started ``SecantusDBServer`` on 127.0.0.1 (a free port); ``StoreBusy`` when
    another process holds the store."""
    os.environ.setdefault("SECANTUS_MAX_PIPELINE_DOCS", str(PIPELINE_DOCS))  # read at import
    from secantus import SecantusDBServer

    try:
        server = SecantusDBServer(
            host="127.0.0.1",
            port=0,
            storage_path=str(options.storage_path),
            cache_size=options.cache_size,
            ttl_sweep_seconds=options.ttl_sweep_seconds,
            client_idle_timeout_s=options.client_idle_timeout,
            # A standalone node: Watchkeeper uses no transactions or change streams, and
            # as a one-node replica set every write also appended to the oplog and kept a
            # retryable-write record, costing database CPU on every write.
            replica_set_name=None,
            # SecantusDB's class turns on mongod's test-only commands unless told (its
            # command line does not): here only the tests' server has them.
            enable_test_commands=options.test_commands,
            sync_on_commit=options.sync_on_commit,
        )
    except Exception as exc:
        if _is_busy(exc):
            raise StoreBusy(f"{options.storage_path} is in use by another process") from exc
        raise
    server.start()
    return server


def publish(uri_file: Path, uri: str) -> None:
    """Write the server's address where a second command on ``DATA_DIR`` looks for it,
    whole or not at all."""
    tmp = uri_file.with_suffix(".tmp")
    tmp.write_text(uri)
    tmp.replace(uri_file)


def unpublish(uri_file: Path, uri: str) -> None:
    """Remove our URI before closing, so no new command attaches to a stopping server.

    Safe against a successor's file: it can only be written once our store is closed.
    """
    with contextlib.suppress(OSError):
        if uri_file.read_text().strip() == uri:
            uri_file.unlink()


def stop_server(server: Any) -> None:
    """``server.stop()``, without waiting out the 2 s its accept thread may take.

    ``stop`` closes the listening socket and joins the accept thread, but closing a
    socket does not interrupt an ``accept`` blocked on it (Linux), so the join would
    time out. A connection to the server's own address is what wakes an ``accept``:
    one is made every ``KNOCK_EVERY`` seconds until ``stop`` returns; the thread then
    sees it is stopping and exits. Best effort: without it ``stop`` is slower only.
    """
    address = server.address
    stopped = threading.Event()

    def knock() -> None:
        while not stopped.wait(KNOCK_EVERY):
            with contextlib.suppress(OSError):
                socket.create_connection(address, timeout=KNOCK_EVERY).close()

    threading.Thread(target=knock, name="wake-accept", daemon=True).start()
    try:
        server.stop()
    finally:
        stopped.set()


def quiet_logs() -> None:
    """SecantusDB logs every connection at INFO: only its warnings are kept."""
    logging.getLogger("secantus").setLevel(logging.WARNING)
