"""The embedded SecantusDB server, owned by one process per ``DATA_DIR``.

The first process to take the lock on ``DATA_DIR/db.lock`` starts the server and
writes its URI to ``DATA_DIR/db.uri``; a second process on the same directory
finds the lock held and connects to that URI instead of opening a second copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "MONGODB_URI is unset, so the embedded database is needed, but SecantusDB is not "
    "installed: run  pip install 'watchkeeper[embedded]'  or set MONGODB_URI"
)


class EmbeddedUnavailable(RuntimeError):
    pass


@dataclass
class EmbeddedServer:
    data_dir: Path
    uri: str = ""
    owner: bool = False
    _server: Any = None
    _lock_fd: int | None = field(default=None, repr=False)

    @property
    def _lock_path(self) -> Path:
        return self.data_dir / "db.lock"

    @property
    def _uri_path(self) -> Path:
        return self.data_dir / "db.uri"

    async def start(self) -> str:
        return await asyncio.to_thread(self._start_sync)

    def _start_sync(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return self._attach_to_running()
        self._lock_fd = fd
        try:
            from secantus import SecantusDBServer
        except ImportError as exc:
            self._release()
            raise EmbeddedUnavailable(INSTALL_HINT) from exc
        server = SecantusDBServer(
            host="127.0.0.1",
            port=0,
            storage_path=str(self.data_dir / "db"),
            ttl_sweep_seconds=30.0,
        )
        server.start()
        self._server = server
        self.owner = True
        self.uri = str(server.uri)
        tmp = self._uri_path.with_suffix(".tmp")
        tmp.write_text(self.uri)
        tmp.replace(self._uri_path)
        log.info("embedded database started in %s", self.data_dir / "db")
        return self.uri

    def _attach_to_running(self) -> str:
        try:
            self.uri = self._uri_path.read_text().strip()
        except FileNotFoundError as exc:
            raise EmbeddedUnavailable(
                f"{self.data_dir} is locked by another Watchkeeper process that has not "
                "published its database address yet; try again in a moment"
            ) from exc
        log.info("embedded database owned by another process; connecting to it")
        return self.uri

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.stop)
            with contextlib.suppress(FileNotFoundError):
                self._uri_path.unlink()
        self._release()

    def _release(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None
