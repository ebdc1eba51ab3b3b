"""Child-process entry point of the embedded SecantusDB server.

Running the server in its own process gives it its own interpreter lock: the
agent's event loop no longer competes with the database for one core. The child
publishes its URI to a file once it accepts connections, stops cleanly on
SIGTERM/SIGINT, and stops by itself if its parent dies, so it never outlives
the Watchkeeper process that owns ``DATA_DIR``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != parent:
            stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="watchkeeper-db")
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--uri-file", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--cache-size", default="256M")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")

    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=args.storage_path,
        cache_size=args.cache_size,
        ttl_sweep_seconds=30.0,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    uri_file = Path(args.uri_file)
    tmp = uri_file.with_suffix(".tmp")
    tmp.write_text(str(server.uri))
    tmp.replace(uri_file)
    threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()
    while not stop.wait(0.5):
        pass
    started = time.monotonic()
    server.stop()
    logging.getLogger(__name__).info("stopped in %.1f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
