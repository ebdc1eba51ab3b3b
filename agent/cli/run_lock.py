"""One ``watchkeeper run`` per ``DATA_DIR``: ``DATA_DIR/run.lock``, held while it runs.

A second ``run`` on the same directory would poll Telegram and open the WhatsApp
session beside the first, so it is refused before it starts anything. The lock is
apart from the embedded database's ``db.lock``: other commands (``chat``, ``doctor``,
``schedule``) still attach to the running database, and the lock holds with
``MONGODB_URI`` too, since the WhatsApp session lives in ``DATA_DIR`` either way.
It is an ``flock``, so the kernel lets go of it when the process dies, however it
dies; the file keeps the holder's pid only to name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = "run.lock"


class AlreadyRunning(RuntimeError):
    """Another ``watchkeeper run`` holds ``DATA_DIR``; the message is one line."""


@contextlib.contextmanager
def hold_run_lock(data_dir: Path) -> Iterator[None]:
    """Hold ``DATA_DIR/run.lock`` for the block; ``AlreadyRunning`` if someone else does."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(
            f"watchkeeper run is already running on DATA_DIR {data_dir} ({_holder(path)}); "
            "stop it first (chat, doctor, schedule and pair can run beside it)"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor releases the lock


def run_holder(data_dir: Path) -> str | None:
    """Who holds ``DATA_DIR/run.lock`` ("pid 123"), or None when no ``run`` does. Looks
    with a shared lock taken and let go at once, and creates nothing."""
    path = data_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(path)
    finally:
        os.close(fd)
    return None


def _holder(path: Path) -> str:
    for _ in range(10):  # the holder writes its pid just after it takes the lock
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text:
                return text.splitlines()[0]
        time.sleep(0.05)
    return "pid unknown"
