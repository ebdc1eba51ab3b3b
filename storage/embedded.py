"""The embedded SecantusDB server, owned by one process per ``DATA_DIR``.

The first process to take the lock on ``DATA_DIR/db.lock`` starts the server as a
child process and the child writes its URI to ``DATA_DIR/db.uri``; a second
process on the same directory finds the lock held and connects to that URI
instead of opening a second copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "MONGODB_URI is unset, so the embedded database is needed, but SecantusDB is not "
    "installed: run  pip install 'watchkeeper[embedded]'  or set MONGODB_URI"
)
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0


class EmbeddedUnavailable(RuntimeError):
    pass


@dataclass
class EmbeddedServer:
    data_dir: Path
    uri: str = ""
    owner: bool = False
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
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
        if importlib.util.find_spec("secantus") is None:
            self._release()
            raise EmbeddedUnavailable(INSTALL_HINT)
        try:
            self.uri = self._spawn()
        except BaseException:
            self._terminate()
            self._release()
            raise
        self.owner = True
        log.info("embedded database started in %s", self.data_dir / "db")
        return self.uri

    def _spawn(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            self._uri_path.unlink()
        log_file = (self.data_dir / "db.log").open("ab")
        self._process = subprocess.Popen(
            [
                sys.executable, "-m", "storage.embedded_server",
                "--storage-path", str(self.data_dir / "db"),
                "--uri-file", str(self._uri_path),
                "--parent-pid", str(os.getpid()),
            ],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            start_new_session=True,  # a Ctrl-C reaches us, and we stop it in order
        )  # fmt: skip
        log_file.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._uri_path.exists():
                return self._uri_path.read_text().strip()
            if self._process.poll() is not None:
                raise EmbeddedUnavailable(
                    f"the embedded database exited at start-up (code {self._process.returncode});"
                    f" see {self.data_dir / 'db.log'}"
                )
            time.sleep(0.02)
        raise EmbeddedUnavailable(
            f"the embedded database did not start within {START_TIMEOUT:.0f} s; "
            f"see {self.data_dir / 'db.log'}"
        )

    def _attach_to_running(self) -> str:
        deadline = time.monotonic() + 5.0
        while not self._uri_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the owner may be starting right now
        try:
            self.uri = self._uri_path.read_text().strip()
        except FileNotFoundError as exc:
            raise EmbeddedUnavailable(
                f"{self.data_dir} is locked by another Watchkeeper process that has not "
                "published its database address; try again in a moment"
            ) from exc
        log.info("embedded database owned by another process; connecting to it")
        return self.uri

    async def stop(self) -> None:
        await asyncio.to_thread(self._terminate)
        self._release()

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.error("embedded database did not stop in %.0f s; killing it", STOP_TIMEOUT)
                process.kill()
                process.wait()
        with contextlib.suppress(FileNotFoundError):
            self._uri_path.unlink()

    def _release(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None
