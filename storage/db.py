"""Opening the database: the configured MongoDB, or the embedded server."""

from __future__ import annotations

import asyncio
import contextlib
import linecache
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import pymongo
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConfigurationError, OperationFailure, ServerSelectionTimeoutError

from runtime.clock import utcnow
from storage.collections import INDEXES, drop_obsolete, retire_legacy_keys
from storage.embedded.owner import EmbeddedServer
from storage.errors import DatabaseUnavailable as DatabaseUnavailable  # where callers found it
from storage.repos.memories import MemoryStore

log = logging.getLogger(__name__)

Doc = dict[str, Any]
DbHealth = Literal["ok", "busy", "unreachable"]
SELECTION_TIMEOUT_MS = 5000
CLOSE_TIMEOUT = 1.0
"""Seconds closing the client may take. Closing ends the server's sessions with one
command; a server stuck in a long operation never answers it (pymongo waits out its
socket timeout, ~30 s), and the sessions expire on the server anyway."""


@dataclass
class Database:
    client: AsyncMongoClient[Doc]
    db: AsyncDatabase[Doc]
    embedded: bool
    owns_server: bool = False
    """True when this process started the embedded server and so is its only writer
    apart from commands that attach to it briefly."""
    query_client: AsyncMongoClient[Doc] | None = None
    """On the embedded server, the model's ``db_query`` runs through a client of its own
    (``QUERY_APP_NAME``, one connection more): a query taking its full time limit holds
    up none of the app's commands, which share one connection (``EMBEDDED_POOL``).
    None on MongoDB, which runs commands side by side: ``queries`` is ``db`` there."""

    @property
    def queries(self) -> AsyncDatabase[Doc]:
        """Where the model's ``db_query`` runs (``query_client``)."""
        return self.db if self.query_client is None else self.query_client[self.db.name]

    async def ping(self) -> bool:
        return await self.health() == "ok"

    async def health(self, seconds: float = 2.0) -> DbHealth:
        """``ok``; ``busy`` when the server takes connections but does not answer in
        time (a long query holding it); ``unreachable`` when nothing is there."""
        try:
            async with asyncio.timeout(seconds):
                await self.client.admin.command("ping")
            return "ok"
        except Exception:
            pass
        for host, port in list(self.client.topology_description.server_descriptions()):
            try:
                async with asyncio.timeout(1.0):
                    _reader, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                continue
            writer.close()
            return "busy"
        return "unreachable"


EMBEDDED_POOL = 1
"""Connections a client keeps to the embedded server. SecantusDB serves each connection
on a thread of its own, and its commands run in Python: under one interpreter lock they
never ran side by side, they only took turns. Over one connection they wait in the
client's queue instead (an asyncio wait), writes queued meanwhile share a command
(``storage.coalesce``): a burst of 100 chats cost 6.5-8.7 CPU-ms a message instead of
9.4-10.4 (``bench/RESULTS.md``, fifteenth sitting). The cost: a command that takes long
holds up the ones behind it, so the model's ``db_query`` (up to 4 s) has a client of its
own (``Database.query_client``); the app's own commands take milliseconds."""
QUERY_APP_NAME = "watchkeeper-queries"
"""The name the ``db_query`` client gives the embedded server in its handshake: how the
server (a failpoint, ``tests/storage/test_query_lane.py``) tells the model's queries
from the app's commands."""
SERVER_IDLE_TIMEOUT = 300.0
"""Seconds a SecantusDB server keeps a silent client connection open (its
``client_idle_timeout_s``, default 300); the embedded server is started with it."""


def max_idle_ms(server_idle_timeout: float) -> int:
    """How long the client keeps an unused connection: half the server's idle timeout,
    so the pool drops a connection well before the server closes it under a write."""
    return max(1, int(server_idle_timeout * 1000 / 2))


def make_client(
    uri: str,
    *,
    embedded: bool = False,
    server_idle_timeout: float = SERVER_IDLE_TIMEOUT,
    app_name: str | None = None,
    connect: bool = True,
) -> AsyncMongoClient[Doc]:
    """A client for ``uri``; ``connect=False``: no connection (not even the monitor's)
    until its first operation."""
    kwargs: dict[str, Any] = {"tz_aware": True}
    if not connect:  # else pymongo's default, or the URI's own
        kwargs["connect"] = False
    if app_name is not None:
        kwargs["appName"] = app_name
    if "serverselectiontimeoutms" not in uri.lower():  # a URI's own setting wins
        kwargs["serverSelectionTimeoutMS"] = SELECTION_TIMEOUT_MS
    if "maxidletimems" not in uri.lower():  # a URI's own setting wins
        # pymongo keeps a connection the server closed after a quiet stretch, and the
        # next write on it fails ("connection is already closed"). Any MongoDB behind a
        # proxy or NAT can do the same, so every client drops idle connections first.
        kwargs["maxIdleTimeMS"] = max_idle_ms(server_idle_timeout)
    if embedded:
        # SecantusDB keeps a record per retryable write and sorts it on every write once
        # it is full, which slows writes ~15x after 10,000 of them. Our writes are made
        # idempotent instead (unique keys, upserts, claims) and retried once by
        # storage.retry when a connection drops.
        kwargs.update(directConnection=True, retryWrites=False, maxPoolSize=EMBEDDED_POOL)
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, **kwargs)
    # pymongo keeps the call stack of every client it makes, as text (to name unclosed
    # clients in its own tests): formatting it read every file on that stack into
    # linecache, which keeps them for the life of the process (0.3-0.5 MiB of source
    # lines). A traceback that needs them reads them again.
    linecache.clearcache()
    return client


def _one_line(value: object, limit: int = 240) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unusable(exc: Exception) -> bool:
    """No server answers, or it refuses our credentials (a bad setting, not a bug)."""
    if isinstance(exc, OperationFailure):
        return exc.code in (13, 18) or "auth" in str(exc).lower()
    return True


def _unreachable(uri: str, exc: Exception) -> str:
    """One line for a MongoDB that does not answer or refuses us, without credentials."""
    hosts = uri.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    if isinstance(exc, OperationFailure):
        detail = (exc.details or {}).get("errmsg") or exc.code
        return f"MongoDB at {hosts} refused the credentials in MONGODB_URI ({detail})"
    reason = _one_line(str(exc).split(", Timeout:", 1)[0].split(" (configured timeouts", 1)[0])
    return (
        f"cannot reach MongoDB at {hosts} (MONGODB_URI): no server answered within the "
        f"selection timeout ({reason}); check MONGODB_URI and that MongoDB is running"
    )


async def _ensure_indexes(db: AsyncDatabase[Doc]) -> None:
    """``storage.collections.ensure_indexes``, every collection at once: on a new store
    (each collection created, each index built) a third faster than one by one; indexes
    earlier versions built and nothing reads are dropped, and rows they wrote re-keyed
    (``storage.collections``), meanwhile. The first failure is raised once all have
    finished (none is left running)."""
    done = await asyncio.gather(
        *(db[name].create_indexes(list(models)) for name, models in INDEXES.items()),
        drop_obsolete(db),
        retire_legacy_keys(db, utcnow()),
        MemoryStore(db).upgrade_blob(utcnow()),  # the one-blob memory, as facts
        return_exceptions=True,
    )
    for result in done:
        if isinstance(result, BaseException):
            raise result


@contextlib.asynccontextmanager
async def open_database(
    uri: str | None,
    db_name: str,
    data_dir: Path,
    *,
    idle_timeout: float = SERVER_IDLE_TIMEOUT,
    server: EmbeddedServer | None = None,
    separate_process: bool = False,
) -> AsyncIterator[Database]:
    """Yield a connected database with indexes; stop what was started, in reverse.

    ``idle_timeout``: seconds the embedded server keeps a silent connection (tests
    shorten it); the client drops idle connections before that. ``server``: the
    embedded server to use (already launched, say) when ``uri`` is None; whoever made
    it stops it (``watchkeeper run`` after the app; the tests' after the session), so
    that one server can outlive the database opened on it. ``separate_process``: a
    server started here runs in a child process (``EMBEDDED_DB_SEPARATE_PROCESS``).
    """
    embedded: EmbeddedServer | None = None
    started: EmbeddedServer | None = None  # ours to stop
    if uri is None:
        if server is None:
            server = started = EmbeddedServer(
                data_dir, idle_timeout=idle_timeout, separate_process=separate_process
            )
        embedded = server
        uri = await embedded.start()  # a start that fails stops what it began
    try:
        try:
            client = make_client(
                uri, embedded=embedded is not None, server_idle_timeout=idle_timeout
            )
        except ConfigurationError as exc:  # a URI pymongo cannot use (bad option, SRV)
            raise DatabaseUnavailable(f"invalid setting MONGODB_URI: {_one_line(exc)}") from None
        queries = None
        if embedded is not None:  # connects with the first query, if one ever comes
            queries = make_client(
                uri,
                embedded=True,
                server_idle_timeout=idle_timeout,
                app_name=QUERY_APP_NAME,
                connect=False,
            )
        try:
            database = Database(
                client=client,
                db=client[db_name],
                embedded=embedded is not None,
                owns_server=embedded is not None and embedded.owner,
                query_client=queries,
            )
            try:
                await _ensure_indexes(database.db)
            except (ServerSelectionTimeoutError, OperationFailure) as exc:
                if embedded is not None or not _unusable(exc):
                    raise
                raise DatabaseUnavailable(_unreachable(uri, exc)) from None
            yield database
        finally:
            if queries is not None:
                await close_client(queries)
            await close_client(client)
    finally:
        if started is not None:
            await started.stop()


async def close_client(client: AsyncMongoClient[Doc], seconds: float = CLOSE_TIMEOUT) -> None:
    """Close ``client`` within ``seconds``, whatever the server does: pymongo's own
    timeout bounds the command that ends the sessions, then the pools close (no
    operation can use the client after). Logged when the server did not answer."""
    began = asyncio.get_running_loop().time()
    try:
        with pymongo.timeout(seconds):
            async with asyncio.timeout(2 * seconds):  # should pymongo not keep to it
                await client.close()
    except TimeoutError:
        log.warning(
            "database client: not closed within %.0f s; left to the process exit", 2 * seconds
        )
        return
    took = asyncio.get_running_loop().time() - began
    if took >= seconds:
        log.warning(
            "database client: the server did not answer as it closed (%.1f s); its "
            "sessions expire there by themselves",
            took,
        )


class DatabaseConfig(Protocol):
    """Where the database is, as the settings say (``agent.config.Settings`` is one)."""

    @property
    def mongodb_uri(self) -> str | None: ...
    @property
    def mongodb_db(self) -> str: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def embedded_db_idle_timeout_seconds(self) -> float: ...
    @property
    def embedded_db_separate_process(self) -> bool: ...


def open_configured(
    config: DatabaseConfig, *, server: EmbeddedServer | None = None
) -> contextlib.AbstractAsyncContextManager[Database]:
    """The database the settings name: ``MONGODB_URI``, or the embedded server in
    ``DATA_DIR`` when it is unset (``server``: the one ``watchkeeper run`` already
    launched, if any). Used by ``build_app`` and by the commands beside a running agent."""
    return open_database(
        config.mongodb_uri,
        config.mongodb_db,
        config.data_dir,
        idle_timeout=config.embedded_db_idle_timeout_seconds,
        server=server,
        separate_process=config.embedded_db_separate_process,
    )
