"""Child-process entry point of the embedded SecantusDB server.

Running the server in its own process gives it its own interpreter lock: the
agent's event loop no longer competes with the database for one core. The child
publishes its URI to a file once it accepts connections and stops cleanly on
SIGTERM/SIGINT. It never outlives the Watchkeeper process that owns ``DATA_DIR``:
on Linux the kernel sends it SIGTERM the moment its parent dies (parent-death
signal), so a restart right after a crash finds the store released within a
fraction of a second; elsewhere a watch thread notices within a second.

Started with ``--spare`` (``storage.embedded.spare``), it loads first and then reads
its other options from stdin, so its start-up overlaps its owner's; at the end of
stdin instead it exits.

Exit codes: 0 after a clean stop, ``BUSY_EXIT`` when another process still holds
the store (the owner waits and tries again), anything else is a failure logged
to ``DATA_DIR/db.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import resource
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from runtime.heap import freeze_heap, tune_collector
from storage.embedded.exit_codes import BUSY_EXIT
from storage.embedded.serving import (
    PIPELINE_DOCS,
    ServerOptions,
    StoreBusy,
    open_server,
    publish,
    quiet_logs,
    stop_server,
    unpublish,
)

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""
FREEZE_AFTER = 2.0
"""Seconds after start before the heap is frozen (``runtime.heap``)."""
DRAIN_LIMIT = 1.0
"""Seconds a server whose owner died waits for the owner's last commands to be applied
(``_drain``); within the new owner's patience (``owner.KILL_AFTER``)."""
DRAIN_QUIET = 0.02
"""Seconds with no connection left that end the drain (one accepted just now registers
a moment after it is accepted)."""

log = logging.getLogger("watchkeeper-db")


def _die_with_parent(parent: int) -> bool:
    """Have Linux send SIGTERM when the parent dies; False if it is already gone.

    The kernel sends the signal when the *thread* that started us exits, so the
    owner starts this process from its event loop's thread (see ``storage.embedded.owner``).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        except (OSError, AttributeError) as exc:
            log.warning("no parent-death signal (%s); watching the parent instead", exc)
    # The parent may have died before the signal was asked for.
    return os.getppid() == parent


def _watch_parent(parent: int, stop: threading.Event) -> None:
    """Fallback where there is no parent-death signal: poll for being orphaned."""
    while not stop.wait(1.0):
        if os.getppid() != parent:
            log.info("stopping: parent %d is gone", parent)
            stop.set()


def _stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT, from a thread that waits for them.

    Not from a signal handler: a handler that sets a ``threading.Event`` can be
    re-entered by the next signal while it holds the event's lock, and then waits
    for that lock forever (seen: the parent-death signal, then others, left a server
    that never released the store). Blocked in this thread before any other starts,
    every thread inherits the mask, so the signals go only to ``sigwait``.
    """
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait() -> None:
        signum = signal.sigwait(signals)
        log.info("stopping on %s", signal.Signals(signum).name)
        stop.set()

    threading.Thread(target=wait, name="stop-signals", daemon=True).start()


def _drain(server: Any) -> None:
    """Apply what a dead owner sent before it died, then return.

    A command the owner wrote to its socket just before a ``kill -9`` (a sent reply's
    record, say) sits in this process's receive buffer; stopping closes every
    connection at once and would drop it. The owner's side is closed, so each of its
    connections reads what is left, applies it and ends: wait for that, bounded by
    ``DRAIN_LIMIT`` (another process still connected, ``watchkeeper chat`` say, keeps
    its connection open).
    """
    deadline = time.monotonic() + DRAIN_LIMIT
    quiet_since: float | None = None
    while (now := time.monotonic()) < deadline:
        if len(server.connections):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= DRAIN_QUIET:
            return
        time.sleep(0.005)


def _limit_memory(megabytes: int) -> None:
    """A runaway query fails alone (``MemoryError`` for that query) instead of taking the
    machine: the server's heap is capped. Thread stacks are kept small, else ~8 MB of
    stack per connection thread would count against the cap."""
    if megabytes <= 0:
        return
    threading.stack_size(1024 * 1024)
    limit = megabytes << 20
    with contextlib.suppress(ValueError, OSError):  # not permitted here: run without it
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="watchkeeper-db")
    parser.add_argument("--storage-path")
    parser.add_argument("--uri-file")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--cache-size", default="256M")
    parser.add_argument("--client-idle-timeout", type=float, default=300.0)
    parser.add_argument("--ttl-sweep-seconds", type=float, default=30.0, help="0: no sweeper")
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument(
        "--spare",
        action="store_true",
        help="load, then read the other options as one JSON list from stdin (EOF: exit)",
    )
    parser.add_argument("--log-file", help="where a spare sends its output once assigned")
    parser.add_argument(
        "--test-commands", action="store_true", help="mongod's test-only commands (tests only)"
    )
    return parser


def _await_assignment(stop: threading.Event) -> list[str] | None:
    """A spare's options, one JSON list on stdin; None at EOF (dismissed, or the owner
    died and its end of the pipe closed) or on a stop signal."""
    line, stdin = b"", sys.stdin.fileno()
    while not stop.is_set():
        ready, _, _ = select.select([stdin], [], [], 0.2)
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            return None
        line += chunk
        if line.endswith(b"\n"):
            options = json.loads(line)
            return [str(option) for option in options]
    return None


def _send_output_to(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    stop = threading.Event()
    _stop_on_signals(stop)  # before any other thread exists: they inherit its mask
    if not _die_with_parent(args.parent_pid):
        log.warning("parent %d exited before the database started; not starting", args.parent_pid)
        return 0
    threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()

    os.environ.setdefault("SECANTUS_MAX_PIPELINE_DOCS", str(PIPELINE_DOCS))  # read at import
    import secantus  # noqa: F401  (loaded now: a spare loads while its owner starts)

    if args.spare:  # loaded while the owner read its settings; now told which store
        options = _await_assignment(stop)
        if options is None:
            return 0
        args = parser.parse_args([*options, "--parent-pid", str(args.parent_pid)])
        if args.log_file:
            _send_output_to(args.log_file)
    if not args.storage_path or not args.uri_file:
        parser.error("--storage-path and --uri-file are required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    quiet_logs()
    _limit_memory(args.memory_mb)

    server_options = ServerOptions(
        Path(args.storage_path),
        client_idle_timeout=args.client_idle_timeout,
        ttl_sweep_seconds=args.ttl_sweep_seconds,
        test_commands=args.test_commands,
        cache_size=args.cache_size,
    )
    try:
        server = open_server(server_options)
    except StoreBusy:
        log.warning("%s is in use by another process", args.storage_path)
        return BUSY_EXIT
    uri = str(server.uri)
    uri_file = Path(args.uri_file)
    if not stop.is_set():
        publish(uri_file, uri)
    # Its modules and tables, out of every later collection's way, and the collector's
    # settings as the agent's (``runtime.heap``): once the owner has started (its first
    # commands are not held up by the collection's pause).
    if not stop.wait(FREEZE_AFTER):
        freeze_heap()
        tune_collector()
    while not stop.wait(0.5):
        pass
    started = time.monotonic()
    unpublish(uri_file, uri)
    if os.getppid() != args.parent_pid:  # the owner died (reparented before the signal)
        _drain(server)
    stop_server(server)
    log.info("stopped in %.2f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
