"""Shared by the inbound media tests: the real pipeline, dispatcher (with the media
fetcher), outbox and agent (scripted model) on a real database, for any channels."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.registry import reach
from agent.config import Settings
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Dispatcher, TierResolver
from agent.conversation.media_turn import MediaFetch
from agent.llm.base import ModelClient
from agent.owner import OwnerSettings
from agent.reach import Owners
from agent.tools.catalog import core_catalog
from channels.delivery.media import MediaCaps, MediaFetcher
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import Channel
from runtime.backoff import Backoff
from storage.repos.inbox import InboxRow
from storage.repos.media_files import MediaStore

Doc = dict[str, Any]
Db = AsyncDatabase[Doc]
Hook = Callable[[MediaFetch], MediaFetch]


class Killed(BaseException):
    """The process dies here: nothing of ours catches it, as with a real crash."""


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class MediaStack:
    pipeline: Pipeline
    outbox: Outbox
    dispatcher: Dispatcher
    fetcher: MediaFetcher

    async def stop(self) -> None:
        await self.pipeline.stop(grace=0)
        await self.outbox.stop()


async def media_stack(
    db: Db,
    settings: Settings,
    channels: Mapping[str, Channel],
    model: ModelClient,
    http: aiohttp.ClientSession,
    *,
    caps: MediaCaps | None = None,
    store: MediaStore | None = None,
    hook: Hook = lambda fetch: fetch,
    resolvers: Mapping[str, TierResolver] | None = None,
) -> MediaStack:
    outbox = Outbox(
        db,
        dict(channels),
        utcnow,
        backoff=Backoff(first=0.01, cap=0.01, retries=2),
        poll_seconds=0.02,
    )
    owner = OwnerSettings(db, utcnow, settings.timezone)
    deps = AgentDeps(
        settings=settings, db=db, http=http, outbox=outbox, owner=owner, clock=utcnow,
        reach=reach(Owners(settings), channels),
    )  # fmt: skip
    fetcher = MediaFetcher(store or MediaStore(db), channels, caps or MediaCaps())
    agent = Agent(model, core_catalog(), media=hook(fetcher))
    dispatcher = Dispatcher(deps, agent, resolvers=dict(resolvers or {}))
    pipeline = Pipeline(db, dispatcher.handle, outbox, channels, utcnow)
    await outbox.start()
    return MediaStack(pipeline, outbox, dispatcher, fetcher)


class CrashBeforeFetch:
    """A fetcher that dies before it downloads anything."""

    async def fetch_row(self, row: InboxRow) -> list[str]:
        raise Killed("between the inbox write and the download")


def crash_before_fetch(_fetch: MediaFetch) -> MediaFetch:
    return CrashBeforeFetch()


class CrashAfterPut(MediaStore):
    """Stores the file, then dies before the inbox row says so."""

    async def put(self, data: bytes, *, key: str, mime: str, kind: str) -> ObjectId:
        await super().put(data, key=key, mime=mime, kind=kind)
        raise Killed("between storing the file and recording it")


async def media_of(db: Db, **query: Any) -> list[Doc]:
    doc = await db["inbox"].find_one(query)
    assert doc is not None, f"no inbox row for {query}"
    media: list[Doc] = doc.get("media", [])
    return media


async def stored_bytes(db: Db, item: Doc) -> bytes:
    assert item["status"] == "stored", item
    return await MediaStore(db).get(item["file_id"])


async def gridfs_files(db: Db) -> int:
    return await db["media.files"].count_documents({})
