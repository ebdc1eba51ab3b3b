"""The embedded server's footprint: geometry libraries load only for a geo query, and
``launch`` starts the server's process early without changing who owns it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pymongo import AsyncMongoClient

from storage.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[2]
GEO_LIBS = ("shapely", "numpy", "s2sphere")
GEO_SCRIPT = """
import json, sys, tempfile
from storage.embedded_geo import defer_geo
found = {"deferred": defer_geo()}
from secantus import SecantusDBServer
found["at_start"] = [m for m in sys.argv[1:] if m in sys.modules]
from pymongo import MongoClient
from pymongo.errors import OperationFailure
with tempfile.TemporaryDirectory() as path:
    server = SecantusDBServer(host="127.0.0.1", port=0, storage_path=path, replica_set_name=None)
    server.start()
    client = MongoClient(server.uri, directConnection=True)
    places = client.t.places
    places.insert_many([{"n": "a", "loc": [1, 1]}, {"n": "b", "loc": [5, 5]}])
    box = {"loc": {"$geoWithin": {"$box": [[0, 0], [2, 2]]}}}
    found["within"] = [d["n"] for d in places.find(box)]
    try:
        list(places.find({"loc": {"$geoWithin": {"$box": "bad"}}}))
    except OperationFailure as exc:
        found["bad_box"] = exc.code
    places.create_index([("g", "2dsphere")])
    places.insert_one({"n": "p", "g": {"type": "Point", "coordinates": [10, 10]}})
    near = {"$near": {"$geometry": {"type": "Point", "coordinates": [10, 10.01]}}}
    found["near"] = [d["n"] for d in places.find({"g": near})]
    found["after"] = [m for m in sys.argv[1:] if m in sys.modules]
    client.close()
    server.stop()
print(json.dumps(found))
"""


def test_geometry_libraries_load_only_when_a_geo_query_needs_them() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GEO_SCRIPT, *GEO_LIBS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["deferred"] is True
    assert found["at_start"] == []
    # The queries still work once they load, errors included.
    assert found["within"] == ["a"]
    assert found["bad_box"] == 2  # BadValue, raised through the deferred GeoError
    assert found["near"] == ["p"]
    assert found["after"] == list(GEO_LIBS)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_launch_starts_the_process_early_and_start_uses_it(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "data")
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
        # Without Shapely and NumPy the idle server stays well under its old ~51 MiB.
        assert _rss_kib(launched.pid) < 45 * 1024
    finally:
        await server.stop()
    assert launched.poll() is not None


async def test_launch_leaves_a_second_process_to_attach(tmp_path: Path) -> None:
    owner = EmbeddedServer(tmp_path / "data")
    uri = await owner.start()
    try:
        second = EmbeddedServer(tmp_path / "data")
        second.launch()  # the lock is held: nothing started
        assert second._process is None
        assert await second.start() == uri
        assert not second.owner
        await second.stop()
    finally:
        await owner.stop()
