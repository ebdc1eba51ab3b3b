"""``launch`` starts the embedded server early, in a process of its own when asked
(``EMBEDDED_DB_SEPARATE_PROCESS``), without changing who owns it; in the agent's own
process, the default, ``test_embedded_inprocess.py``."""

from __future__ import annotations

from pathlib import Path

from pymongo import AsyncMongoClient

from storage.embedded.owner import EmbeddedServer


async def test_launch_starts_the_process_early_and_start_uses_it(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "data", separate_process=True)
    server.launch()
    launched = server._process
    assert launched is not None
    try:
        uri = await server.start()
        assert server._process is launched and server.owner
        client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, directConnection=True)
        try:
            assert (await client.admin.command("ping"))["ok"] == 1
        finally:
            await client.close()
    finally:
        await server.stop()
    assert launched.poll() is not None


async def test_launch_leaves_a_second_process_to_attach(tmp_path: Path) -> None:
    owner = EmbeddedServer(tmp_path / "data", separate_process=True)
    uri = await owner.start()
    try:
        second = EmbeddedServer(tmp_path / "data", separate_process=True)
        second.launch()  # the lock is held: nothing started
        assert second._process is None
        assert await second.start() == uri
        assert not second.owner
        await second.stop()
    finally:
        await owner.stop()
