"""Where a test's app finds its database: the two ways a deployment names one.

* ``embedded``, for every app test: ``MONGODB_URI`` unset, as ``scripts/run`` starts by
  default. The product's own ``EmbeddedServer`` runs SecantusDB, a standalone node, and
  the app is its sole owner (``Database.owns_server``: whatever a dead process left
  unfinished is recovered at once). The server takes seconds to start, so one serves
  the session: each app is handed it as ``watchkeeper run`` hands over the server it
  launched (``build_app(embedded=...)``) and opens a database of its own on it, of which
  it is then the only writer, as in production.

  Where the server runs is the one thing that differs from ``scripts/run``'s default: on
  a thread of the agent's process there, in a process of its own here (as
  ``EMBEDDED_DB_SEPARATE_PROCESS`` runs it). On a thread of the pytest process its work
  shares the tests' interpreter lock: the first half of the suite went at under half
  its pace, and a test that counts how replies' writes group together
  (``test_pipeline_group_commit.py``) saw fewer shared writes than it allows. What
  the app sees is the same either way (the opener, a standalone node, sole ownership,
  the options). The tests marked ``every_database`` also run on a
  server started the default way (``in_process``); ``tests/storage/test_embedded_*``
  test both ways of running it, and ``tests/agent/cli`` runs ``watchkeeper run`` itself,
  with its default, through starts, stops and kills.
* ``external``, for the tests marked ``every_database``: ``MONGODB_URI`` naming a
  replica set, as ``deploy/docker-compose.yml`` does. pymongo discovers it and retries
  writes; the app owns nothing, so it takes over only claims that have gone stale.

The test's own client (the ``db`` fixture's) is the product's client for that mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pymongo import AsyncMongoClient

from storage.db import close_client, make_client
from storage.embedded.owner import EmbeddedServer

Doc = dict[str, Any]
Mode = Literal["embedded", "external"]
REPLICA_SET = "rs0"
"""The external server's replica set, named as in ``deploy/docker-compose.yml``."""


@dataclass(frozen=True)
class AppDb:
    """The database a test's app is configured with, and the test's own client on it."""

    mode: Mode
    uri: str
    """Where the test's own clients connect."""
    client: AsyncMongoClient[Doc]
    server: EmbeddedServer | None = None
    """The running embedded server, for ``build_app(embedded=...)``; None: external."""

    @property
    def mongodb_uri(self) -> str | None:
        """The app's ``MONGODB_URI`` setting: unset for the embedded server."""
        return None if self.server is not None else self.uri

    @property
    def data_dir(self) -> Path | None:
        """The embedded server's ``DATA_DIR``: a command beside the running app
        (``watchkeeper pair``, ``schedule``) finds the app's database there, as it does
        in production. Only for those tests; the others keep a ``DATA_DIR`` each."""
        return self.server.data_dir if self.server is not None else None


@contextlib.asynccontextmanager
async def start_embedded(data_dir: Path, *, separate: bool = False) -> AsyncIterator[AppDb]:
    """The embedded server in ``data_dir``, started as ``watchkeeper run`` starts it (in a
    process of its own when ``separate``).

    Two differences: mongod's test commands are on (``configureFailPoint``), and there is
    no TTL sweeper: it deletes by the wall clock, and would delete what
    a test stored under its own fake clock (a held group's ``expires_at`` a day after a
    "now" days ago); ``tests/storage/test_held_expiry.py`` runs one."""
    server = EmbeddedServer(
        data_dir, ttl_sweep_seconds=0, test_commands=True, separate_process=separate
    )
    uri = await server.start()
    try:
        client = make_client(uri, embedded=True)
        try:
            yield AppDb("embedded", uri, client, server)
        finally:
            await close_client(client)
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def start_external(storage: Path) -> AsyncIterator[AppDb]:
    """A one-node replica set in this process, named by a URI as a user's MongoDB is."""
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(storage),
        replica_set_name=REPLICA_SET,
        ttl_sweep_seconds=0,  # as the embedded one's
    )
    server.start()
    try:
        async with attach(f"mongodb://127.0.0.1:{server.port}/?replicaSet={REPLICA_SET}") as db:
            yield db
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def attach(uri: str) -> AsyncIterator[AppDb]:
    """A server already running, named by ``MONGODB_URI`` (as a test's child process
    reaches the test's own: another process, so not the owner)."""
    client = make_client(uri)
    try:
        yield AppDb("external", uri, client)
    finally:
        await close_client(client)
