"""The whole app on the test database, chatted with through a recording owner channel.

``chat_app`` builds the real composition (pipeline, outbox, dispatcher, agent, core
tools) with the given model client, usually a real adapter pointed at a fake model
API. Building it again on the same ``db_name`` is a restart.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.app.application import App, Feature
from agent.app.core import build_app
from agent.llm.base import ModelClient
from channels.types import Channel
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel

Doc = dict[str, Any]


@dataclass
class ChatApp:
    app: App
    chat: RecordingChannel
    """The terminal stand-in: its sender is the owner."""

    async def ask(self, text: str) -> list[str]:
        """Say ``text`` as the owner; the replies it got once everything settled."""
        before = len(self.chat.sent)
        await self.chat.say(text)
        await self.app.pipeline.join()
        return self.chat.texts()[before:]

    async def inbox(self) -> list[Doc]:
        return await self.app.deps.db["inbox"].find({}, sort=[("received_at", 1)]).to_list()


@contextlib.asynccontextmanager
async def chat_app(
    app_db: AppDb,
    db_name: str,
    model: ModelClient,
    data_dir: Path,
    *,
    channels: Sequence[Channel] = (),
    features: Sequence[Feature] = (),
    **settings: Any,
) -> AsyncIterator[ChatApp]:
    config = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db_name,
        data_dir=data_dir,
        **settings,
    )
    chat = RecordingChannel()
    async with build_app(
        config,
        embedded=app_db.server,
        model=model,
        channels=[chat, *channels],
        features=list(features),
    ) as app:
        yield ChatApp(app, chat)
