"""Writes an owner sent just before a ``kill -9`` are applied by its embedded server.

The owner of the embedded database is killed right after writing its commands (a sent
reply's record, say): they are in the server's hands, not yet answered. The server,
told of its parent's death, applies them before it closes the store; a restart finds
every one (``storage.embedded.server``, ``_drain``).

A stand-in owner process starts the real server, opens many connections (each answers
a ``ping``, as a client's pooled connections), writes one insert on each without
reading an answer, and kills itself.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from storage.db import make_client
from storage.embedded.owner import EmbeddedServer
from tests.waiting import WATCHDOG

ROOT = Path(__file__).resolve().parents[2]
WRITES = 40
OWNER = """
import os, signal, socket, struct, subprocess, sys, time
import bson
data, writes = sys.argv[1], int(sys.argv[2])
uri_file = os.path.join(data, "db.uri")
subprocess.Popen([sys.executable, "-m", "storage.embedded.server",
                  "--storage-path", os.path.join(data, "db"), "--uri-file", uri_file,
                  "--parent-pid", str(os.getpid())])
deadline = time.monotonic() + 60
while not os.path.exists(uri_file):
    assert time.monotonic() < deadline, "no server"
    time.sleep(0.01)
host, port = open(uri_file).read().strip().split("//")[1].rstrip("/").split(":")

def command(sock, n, doc):
    body = struct.pack("<iiI", n, 0, 2013) + struct.pack("<I", 0) + b"\\0" + bson.encode(doc)
    sock.sendall(struct.pack("<i", len(body) + 4) + body)

def answer(sock):
    size = struct.unpack("<i", sock.recv(4, socket.MSG_WAITALL))[0]
    sock.recv(size - 4, socket.MSG_WAITALL)

socks = [socket.create_connection((host, int(port))) for _ in range(writes)]
for n, sock in enumerate(socks):  # pooled connections, as a client keeps them
    command(sock, n, {"ping": 1, "$db": "admin"})
    answer(sock)
for n, sock in enumerate(socks):
    command(sock, 1000 + n, {"insert": "records", "documents": [{"_id": n}], "$db": "owner_death"})
os.kill(os.getpid(), signal.SIGKILL)  # no answer read, nothing closed
"""


async def test_commands_sent_before_the_owner_was_killed_are_applied(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    owner = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", OWNER, str(data), str(WRITES)],
        cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG * 2,
    )  # fmt: skip
    assert owner.returncode == -9, owner.stderr
    server = EmbeddedServer(data, separate_process=True)
    client = make_client(await server.start(), embedded=True)  # once the old one let go
    try:
        records = client["owner_death"]["records"]
        stored = sorted([doc["_id"] async for doc in records.find()])
    finally:
        await client.close()
        await server.stop()
    assert stored == list(range(WRITES))
