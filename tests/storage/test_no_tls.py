"""The embedded database process runs without OpenSSL, and still stores and finds."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from storage.db import open_database
from storage.embedded import EmbeddedServer
from storage.no_tls import without_openssl

ROOT = Path(__file__).resolve().parents[2]


async def test_the_embedded_server_maps_no_openssl_and_serves(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path)
    async with open_database(None, "notls", tmp_path, server=server) as database:
        await database.db["notes"].insert_one({"_id": "n1", "text": "pay rent"})
        assert await database.db["notes"].find_one({"_id": "n1"}) == {
            "_id": "n1",
            "text": "pay rent",
        }
        assert server.pid is not None
        maps = await asyncio.to_thread(Path(f"/proc/{server.pid}/maps").read_text)
        assert "libcrypto" not in maps
        assert "libssl" not in maps


STANDALONE = """
import sys
from storage.no_tls import without_openssl
assert without_openssl()
import hashlib, ssl
assert hashlib.sha256(b"").hexdigest().startswith("e3b0c442")
assert hashlib.md5(b"x").hexdigest() == "9dd4e461268c8034f5c8564e155c67a6"
try:
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
except NotImplementedError as exc:
    print(exc)
try:
    ssl.wrap_socket
except AttributeError as exc:
    print(exc)
print(sorted(m for m in ("_ssl", "_hashlib") if sys.modules.get(m) is not None))
"""


def test_tls_asked_for_is_refused_clearly_and_hashes_still_work() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    refused, missing, loaded = done.stdout.strip().splitlines()
    assert refused == "the embedded database serves no TLS (storage.no_tls)"
    assert missing.startswith("ssl.wrap_socket: the embedded database serves no TLS")
    assert loaded == "[]"


def test_a_process_that_already_has_openssl_keeps_it() -> None:
    import ssl

    assert without_openssl() is False
    assert sys.modules["ssl"] is ssl
    assert ssl.create_default_context() is not None
