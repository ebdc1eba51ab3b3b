"""The embedded SecantusDB server, owned by one process per ``DATA_DIR``.

The first process to take the lock on ``DATA_DIR/db.lock`` starts the server, on a
thread of its own process (``storage.embedded.inprocess``, the default) or as a child
process (``separate_process``), and publishes its URI in ``DATA_DIR/db.uri``; a second
process on the same directory finds the lock held and connects to that URI
instead of opening a second copy.

A server on a thread closes with its process: a new owner started after a crash opens
the store at once (unless a store is held by some other process; it waits as below).
A child dies with its owner (``storage.embedded.server``), but closing the store
takes it a moment, and meanwhile ``db.lock`` is already free: a new owner started
right after a crash finds WiredTiger's own lock on ``DATA_DIR/db`` still held. It
waits for that, bounded by ``RELEASE_TIMEOUT`` and logged, before it starts its own
server; if the store is never released it fails with one line. A child busy in one
long operation cannot act on the parent-death signal (one regex match holds its
interpreter lock for as long as it runs), so when the holder is still there after
``KILL_AFTER`` and is an orphaned Watchkeeper database server, it is ended with
SIGKILL: the store is journaled, so nothing committed is lost. Any other holder is
left alone.

Its owner stops it the same way: SIGTERM, and SIGKILL after ``STOP_TIMEOUT`` if one
operation keeps it from acting on the signal, so a stop ends in bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import importlib.util
import itertools
import logging
import os
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from storage.embedded.exit_codes import BUSY_EXIT
from storage.embedded.inprocess import InProcessServer
from storage.embedded.serving import ServerOptions
from storage.embedded.spare import SpareServer

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "MONGODB_URI is unset, so the embedded database is needed, but SecantusDB is not "
    "installed: run  pip install 'watchkeeper[embedded]'  or set MONGODB_URI"
)
START_TIMEOUT = 30.0
STOP_TIMEOUT = 2.0
"""How long the server may take to stop after SIGTERM before it is killed. It stops in
well under a second (it closes the store, and looks for the signal twice a second),
unless one operation holds it (a long regex match keeps it from acting on any signal);
then SIGKILL: the store is journaled, so nothing committed is lost, and the next start
recovers it. Short, so that the whole stop fits in docker's 10 s grace."""
RELEASE_TIMEOUT = 15.0
"""How long a new owner waits for an old server (say, of a killed process) to close
the store."""
KILL_AFTER = 2.0
"""How long an orphaned server of ours may take to close the store before it is killed
(it closes within a fraction of a second unless it is stuck in an operation)."""
ATTACH_TIMEOUT = 25.0
"""How long a second command waits for the owner to publish its address (the owner
may be waiting for a release itself)."""
POLL = 0.05
URI_POLL = 0.005
"""How often start-up looks for the server's address: it waits on nothing else."""
STORE_LOCK = "WiredTiger.lock"
"""WiredTiger's single-process lock file in the store: an fcntl lock held while open."""


class EmbeddedUnavailable(RuntimeError):
    pass


def store_holder(lock_file: Path) -> int | None:
    """None when no process has the store open; else the holder's pid (0 if unknown)."""
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except OSError:
        return None  # no store yet (or unreadable: the server will say why)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                return None
            return _lock_owner(fd)
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)  # also drops the probe's lock


SERVER_MODULES = frozenset({"storage.embedded.server", "storage.embedded_server"})
"""The server's module as started by this version, and by versions before the storage
package existed: an orphan of the previous version is recognised on the first start
after an upgrade."""


def orphaned_server(pid: int, store: Path) -> bool:
    """Whether ``pid`` is a Watchkeeper database server (``storage.embedded.server``) whose
    owner is gone: the process that started it (``--parent-pid``) is no longer its parent.

    Asked about the process the kernel names as holding ``store``'s lock, while we hold
    ``DATA_DIR/db.lock``, so no live owner can be using it. A server started with
    ``--storage-path`` must name ``store``; a spare's path came on its stdin."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    args = [os.fsdecode(arg) for arg in argv if arg]
    if not SERVER_MODULES & set(args) or "--parent-pid" not in args:
        return False
    options = dict(itertools.pairwise(args))
    if "--storage-path" in options:
        try:
            named = Path(os.readlink(f"/proc/{pid}/cwd")) / options["--storage-path"]
        except OSError:
            return False
        if named.resolve() != store.resolve():
            return False
    parent = stat.rsplit(")", 1)[-1].split()[1]  # after the command name: state, ppid
    return options["--parent-pid"] != parent


def _lock_owner(fd: int) -> int:
    """The pid holding an fcntl lock on ``fd`` (Linux, 64-bit ``struct flock``), else 0."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return 0
    layout = "hhqqi4x"  # l_type, l_whence, l_start, l_len, l_pid, padding
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(layout, fcntl.F_WRLCK, 0, 0, 0, 0))
        l_type, _, _, _, pid = struct.unpack(layout, answer)
    except (OSError, struct.error):
        return 0
    return int(pid) if l_type != fcntl.F_UNLCK else 0


@dataclass
class EmbeddedServer:
    data_dir: Path
    idle_timeout: float = 300.0
    """Seconds the server keeps a silent client connection (SecantusDB's
    ``client_idle_timeout_s``); ``storage.db`` keeps its clients under it."""
    separate_process: bool = False
    """Run the server in a child process (``storage.embedded.server``) instead of on a
    thread of this one (``storage.embedded.inprocess``, the default): isolated from the
    agent's faults, interpreter lock and heap, for about 24 MiB more
    (``EMBEDDED_DB_SEPARATE_PROCESS``)."""
    memory_mb: int = 1024
    """Cap on a separate server process's heap: a runaway query fails alone (0: no cap)."""
    ttl_sweep_seconds: float = 30.0
    """How often the server deletes documents past their TTL index's expiry, by the wall
    clock (0: never; the tests' server, whose documents are dated by a fake clock)."""
    test_commands: bool = False
    """mongod's test-only commands (``configureFailPoint``): for the tests' server, which
    makes the database fail on cue; never for an owner's, where any local process could."""
    uri: str = ""
    owner: bool = False
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _lock_fd: int | None = field(default=None, repr=False)
    _inprocess: InProcessServer | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        """The server process this object started; None when attached, not started, or
        serving in this process."""
        return self._process.pid if self._process is not None else None

    @property
    def _serving(self) -> bool:
        if self._inprocess is not None:
            return bool(self._inprocess.uri)
        return self._process is not None and self._process.poll() is None

    @property
    def _lock_path(self) -> Path:
        return self.data_dir / "db.lock"

    @property
    def _uri_path(self) -> Path:
        return self.data_dir / "db.uri"

    @property
    def _store_path(self) -> Path:
        return self.data_dir / "db"

    def launch(self, spare: SpareServer | None = None) -> None:
        """Start the server's process now without waiting for it, when nothing is in the
        way: ``watchkeeper run`` calls this before its slow imports, so the server boots
        beside them. ``start`` then waits for it; anything unusual (another owner, a store
        still held, SecantusDB missing) is left to ``start``.

        Call it from the thread that will run the event loop (see ``_start_owned``).
        ``spare``: a server process already loaded (``storage.embedded.spare``), used
        instead of a new one when ``separate_process``; dismissed if it is not needed.
        """
        try:
            if self._process is not None or self._lock_fd is not None:
                return  # begun already (the lock is taken first, whichever way it runs)
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                if not self._take_lock():
                    return
            except OSError:
                return  # start() says what is wrong
            if store_holder(self._store_path / STORE_LOCK) is None and (
                importlib.util.find_spec("secantus") is not None
            ):
                self._begin(spare)
        finally:
            if spare is not None:
                spare.dismiss()

    async def start(self) -> str:
        """Own the server (start it) or, if another process owns it, attach to it. Once
        started, its address at once: a second start (a database opened again on the same
        server) must not touch it, and its cancellation must not stop it."""
        if self.owner and self.uri and self._serving:
            return self.uri
        await asyncio.to_thread(self.data_dir.mkdir, parents=True, exist_ok=True)
        deadline = time.monotonic() + ATTACH_TIMEOUT
        said = False
        while self._lock_fd is None and not await asyncio.to_thread(self._take_lock):
            uri = self._published_uri()
            if uri:
                self.uri = uri
                log.info("embedded database owned by another process; connecting to it")
                return uri
            if time.monotonic() >= deadline:
                raise EmbeddedUnavailable(
                    f"{self.data_dir} is locked by another Watchkeeper process that has not "
                    f"published its database address within {ATTACH_TIMEOUT:.0f} s; "
                    "try again in a moment"
                )
            if not said:
                log.info(
                    "waiting for the process that owns %s to start its database", self.data_dir
                )
                said = True
            await asyncio.sleep(POLL)
        try:
            if importlib.util.find_spec("secantus") is None:
                raise EmbeddedUnavailable(INSTALL_HINT)
            self.uri = await self._start_owned()
        except BaseException:
            await asyncio.to_thread(self._terminate)
            self._release()
            raise
        self.owner = True
        log.info("embedded database started in %s", self._store_path)
        return self.uri

    def _take_lock(self) -> bool:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        # An address left by a server whose owner died is stale: nobody may attach to it.
        with contextlib.suppress(FileNotFoundError):
            self._uri_path.unlink()
        return True

    def _published_uri(self) -> str:
        try:
            return self._uri_path.read_text().strip()
        except FileNotFoundError:
            return ""

    async def _start_owned(self) -> str:
        """Start the server (``launch`` may have begun it) and wait for its address;
        while another process still holds the store, wait for it (bounded, logged)."""
        deadline = time.monotonic() + RELEASE_TIMEOUT
        waiting_since: float | None = None
        while True:
            if self._process is None and self._inprocess is None:
                waiting_since = await asyncio.to_thread(
                    self._wait_for_release, deadline, waiting_since
                )
                self._begin()
            uri = await self._started()
            if uri is not None:
                if waiting_since is not None:
                    log.info(
                        "the previous database server released %s; started after %.1f s",
                        self._store_path,
                        time.monotonic() - waiting_since,
                    )
                return uri
            # The store was found in use although the probe did not see it.
            self._process = self._inprocess = None
            if waiting_since is None:
                waiting_since = time.monotonic()
                self._log_waiting(0)
            if time.monotonic() >= deadline:
                raise self._not_released(0)
            await asyncio.sleep(0.2)

    def _begin(self, spare: SpareServer | None = None) -> None:
        """Start opening the store: a thread of this process, or a child process.

        A child is started from the event loop's thread, not a worker's: Linux sends the
        parent-death signal when the thread that started the child exits, and the loop's
        thread lives as long as we do."""
        if self.separate_process:
            self._process = self._popen(spare)
            return
        self._inprocess = InProcessServer(
            ServerOptions(
                self._store_path,
                client_idle_timeout=self.idle_timeout,
                ttl_sweep_seconds=self.ttl_sweep_seconds,
                test_commands=self.test_commands,
                sync_on_commit=True,  # it dies with the agent: see ``ServerOptions``
            ),
            self._uri_path,
        )
        self._inprocess.begin()

    async def _started(self) -> str | None:
        """The address once the server begun serves; None if it found the store in use."""
        if self._process is not None:
            return await asyncio.to_thread(self._await_uri, self._process)
        inprocess = self._inprocess
        if inprocess is None:
            raise RuntimeError("_started before _begin")
        try:
            return await asyncio.to_thread(inprocess.wait, START_TIMEOUT)
        except TimeoutError:
            raise EmbeddedUnavailable(
                f"the embedded database did not start within {START_TIMEOUT:.0f} s"
            ) from None
        except Exception as exc:
            self._inprocess = None  # its thread has ended
            raise EmbeddedUnavailable(f"the embedded database did not start: {exc}") from exc

    def _wait_for_release(self, deadline: float, waiting_since: float | None) -> float | None:
        """Block until no process holds the store; returns when waiting began, if it did."""
        lock_file = self._store_path / STORE_LOCK
        killed: int | None = None
        while (holder := store_holder(lock_file)) is not None:
            if waiting_since is None:
                waiting_since = time.monotonic()
                self._log_waiting(holder)
            if (
                holder
                and holder != killed
                and time.monotonic() - waiting_since >= KILL_AFTER
                and orphaned_server(holder, self._store_path)
            ):
                log.warning(
                    "the previous database server (pid %d) still holds %s %.0f s after its "
                    "owner died, busy in an operation; ending it",
                    holder,
                    self._store_path,
                    time.monotonic() - waiting_since,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(holder, signal.SIGKILL)
                killed = holder
            if time.monotonic() >= deadline:
                raise self._not_released(holder)
            time.sleep(POLL)
        return waiting_since

    def _log_waiting(self, holder: int) -> None:
        log.info(
            "waiting up to %.0f s for the previous database server%s to release %s",
            RELEASE_TIMEOUT,
            f" (pid {holder})" if holder else "",
            self._store_path,
        )

    def _not_released(self, holder: int) -> EmbeddedUnavailable:
        who = f"another process (pid {holder})" if holder else "another process"
        return EmbeddedUnavailable(
            f"the database in {self._store_path} is still in use by {who} after "
            f"{RELEASE_TIMEOUT:.0f} s; stop that process and start again"
        )

    def _popen(self, spare: SpareServer | None = None) -> subprocess.Popen[bytes]:
        options = [
            "--storage-path", str(self._store_path),
            "--uri-file", str(self._uri_path),
            "--client-idle-timeout", str(self.idle_timeout),
            "--memory-mb", str(self.memory_mb),
            "--ttl-sweep-seconds", str(self.ttl_sweep_seconds),
            *(["--test-commands"] if self.test_commands else []),
        ]  # fmt: skip
        log_path = self.data_dir / "db.log"
        if spare is not None and (process := spare.assign(options, log_path)) is not None:
            return process
        with log_path.open("ab") as log_file:
            return subprocess.Popen(
                [sys.executable, "-m", "storage.embedded.server",
                 "--parent-pid", str(os.getpid()), *options],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True,  # a Ctrl-C reaches us, and we stop it in order
            )  # fmt: skip

    def _await_uri(self, process: subprocess.Popen[bytes]) -> str | None:
        """The child's URI once published; None if it exited because the store is busy."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._uri_path.exists():
                return self._uri_path.read_text().strip()
            if process.poll() is not None:
                if process.returncode == BUSY_EXIT:
                    return None
                raise EmbeddedUnavailable(
                    f"the embedded database exited at start-up (code {process.returncode});"
                    f" see {self.data_dir / 'db.log'}"
                )
            time.sleep(URI_POLL)
        raise EmbeddedUnavailable(
            f"the embedded database did not start within {START_TIMEOUT:.0f} s; "
            f"see {self.data_dir / 'db.log'}"
        )

    async def stop(self) -> None:
        await asyncio.to_thread(self._terminate)
        self._release()
        self.owner, self.uri = False, ""

    def _terminate(self) -> None:
        inprocess, self._inprocess = self._inprocess, None
        if inprocess is not None:
            inprocess.stop()
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning(
                    "embedded database (pid %d) did not stop within %.1f s of SIGTERM, busy "
                    "in an operation; killing it (the store is journaled: the next start "
                    "recovers it)",
                    process.pid,
                    STOP_TIMEOUT,
                )
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
