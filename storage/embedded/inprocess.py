"""The embedded SecantusDB server in the agent's own process: the default.

``begin`` loads SecantusDB and opens the store on a thread of its own, so that
``watchkeeper run`` goes on loading meanwhile; ``wait`` hands over the address once it
serves (or None when another process still holds the store); ``stop`` closes it. The
address is published in ``DATA_DIR/db.uri`` as the child's is, so a second command on
the same ``DATA_DIR`` attaches to it.

What this trades against a process of its own (``EMBEDDED_DB_SEPARATE_PROCESS``):
about 24 MiB and a process less, and nothing to orphan (the store is closed with us,
so a restart right after a crash opens it at once); but the database shares the
agent's interpreter lock and heap, and it dies with the agent: what it acknowledged
must already be on disk, so each commit waits for its journal's fsync
(``ServerOptions.sync_on_commit``: ~0.3 ms a commit here; a child outlives its owner's
SIGKILL and closes the store cleanly instead). A native fault in WiredTiger ends the agent (which
its supervisor restarts; the store is journaled), there is no 1 GiB heap cap (an
aggregation stage still holds at most ``serving.PIPELINE_DOCS`` documents), and one
long regex match holds the lock for as long as it runs (``db_query`` refuses the
patterns that could; Watchkeeper's own queries use one anchored prefix).

Never probe a store this process serves with ``owner.store_holder``: WiredTiger's lock
is an fcntl lock, which the process drops when any descriptor of the file is closed.
"""

from __future__ import annotations

import threading
from pathlib import Path

from storage.embedded.serving import (
    ServerOptions,
    StoreBusy,
    open_server,
    publish,
    quiet_logs,
    stop_server,
    unpublish,
)


class InProcessServer:
    """One SecantusDB server on a thread of this process, which opens the store, serves
    until ``stop`` and closes it: SecantusDB's close reads through the session of the
    thread that opened the store (from another thread it logs an error)."""

    def __init__(self, options: ServerOptions, uri_file: Path) -> None:
        self._options, self._uri_file = options, uri_file
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.uri = ""

    def begin(self) -> None:
        """Start opening the store, once; ``wait`` for the outcome."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="embedded-db", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        try:
            quiet_logs()
            server = open_server(self._options)
        except BaseException as exc:  # handed to ``wait``, on the caller's thread
            self._error = exc
            self._ready.set()
            return
        self.uri = str(server.uri)
        try:
            publish(self._uri_file, self.uri)
        except BaseException as exc:
            self._error = exc
            self._stopping.set()
        self._ready.set()
        self._stopping.wait()
        unpublish(self._uri_file, self.uri)
        stop_server(server)

    def wait(self, timeout: float) -> str | None:
        """Block until it serves: its address, or None when another process still holds
        the store (a new ``InProcessServer`` may try again). Raises what opening raised,
        and ``TimeoutError`` after ``timeout`` seconds."""
        self.begin()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the embedded database did not start within {timeout:.0f} s")
        if isinstance(self._error, StoreBusy):
            return None
        if self._error is not None:
            raise self._error
        return self.uri

    def stop(self) -> None:
        """Unpublish and close the store, from the thread that opened it; returns once it
        is closed (an open still under way finishes first)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
