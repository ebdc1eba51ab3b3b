"""A database process started before the settings are read, to be told its store later.

``watchkeeper run`` starts one first thing: its interpreter, and SecantusDB's modules,
load while the agent reads its settings, instead of after. ``EmbeddedServer.launch``
hands it the store's options on its stdin (one JSON list); if the settings name another
database, or anything ends the run first, ``dismiss`` closes its stdin and it exits.
Should the owner die, its end of the pipe closes and the parent-death signal comes: the
spare exits either way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

SEPARATE_PROCESS = "embedded_db_separate_process"
"""The setting that asks for the database in a process of its own (``agent.config``)."""
TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
"""What the settings read as true (pydantic's words)."""


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for the database in a process of its own, the only
    case where a spare helps. Read before the settings are (any case, as they read it);
    set only in ``.env``, the child is still used, started without the head start."""
    env = os.environ if environ is None else environ
    return any(
        name.lower() == SEPARATE_PROCESS and value.strip().lower() in TRUE
        for name, value in env.items()
    )


class SpareServer:
    """``storage.embedded.server --spare``: loaded, waiting for its options."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process: subprocess.Popen[bytes] | None = process

    @property
    def pid(self) -> int | None:
        """Its process, until assigned or dismissed."""
        return self._process.pid if self._process is not None else None

    @classmethod
    def start(cls) -> SpareServer | None:
        """Start one; None where it could not serve (SecantusDB not installed, or
        ``MONGODB_URI`` in the environment: then no embedded database is wanted).

        Call it from the thread that will run the event loop (see
        ``storage.embedded.server._die_with_parent``).
        """
        if os.environ.get("MONGODB_URI") or importlib.util.find_spec("secantus") is None:
            return None
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "storage.embedded.server", "--spare",
                 "--parent-pid", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # as EmbeddedServer's own: a Ctrl-C reaches us first
            )  # fmt: skip
        except OSError:  # out of processes or memory: the usual launch will say so
            return None
        return cls(process)

    def assign(self, options: list[str], log_file: Path) -> subprocess.Popen[bytes] | None:
        """Give it its store; None (and nothing to stop) if it is gone or already used."""
        process, self._process = self._process, None
        if process is None or process.stdin is None or process.poll() is not None:
            return None
        try:
            process.stdin.write(json.dumps([*options, "--log-file", str(log_file)]).encode())
            process.stdin.write(b"\n")
            process.stdin.close()
        except OSError:  # it died meanwhile
            process.kill()
            process.wait()
            return None
        return process

    def dismiss(self) -> None:
        """Let it go: it exits at the end of its stdin, without being waited for here
        (``subprocess`` reaps it later); nothing if already assigned."""
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
