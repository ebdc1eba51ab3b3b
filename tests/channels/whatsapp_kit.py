"""Shared by the WhatsApp tests: the numbers, and the app with WhatsApp on a fake client.

Offline by construction: the fake client stands in for neonize's ``NewAClient``
(whose ``connect`` would dial web.whatsapp.com), and the conftest guard fails any
attempt to reach the internet.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from neonize.proto.Neonize_pb2 import Connected

from agent.app.application import Parts
from agent.app.core import App, build_app
from agent.app.registry import REGISTRY, replaced, whatsapp_entry
from agent.tools.catalog import always
from agent.tools.cron import MANAGE_CRONJOB
from channels.whatsapp import WhatsAppChannel
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.features import contributing
from tests.fakes.scripted import Request, ScriptedModel
from tests.fakes.whatsapp import FakeClient, jid, message_event
from tests.waiting import outbox_drained

OWNER = "+4915100000001"  # the linked account is the owner's own number
ALICE = "+49151234567"
BOB = "+4917611122233"


@dataclass
class Kit:
    app: App
    client: FakeClient
    model: ScriptedModel
    answers: list[Any] = field(default_factory=list)

    @property
    def channel(self) -> WhatsAppChannel:
        channel = self.app.channels["whatsapp"]
        assert isinstance(channel, WhatsAppChannel)
        return channel

    async def say(self, sender: str, text: str, **kw: Any) -> None:
        chat = kw.pop("chat", None) or jid(sender)
        await self.client.emit(message_event(chat, jid(sender), text, **kw))

    async def settle(self) -> None:
        """Wait until every message said so far is handled and its replies are sent.

        ``say`` returns once the message is stored and queued, so the pipeline's
        workers (a contact's burst window included) hold all there is to handle; what
        they queued in the outbox is sent by its own task.
        """
        await self.app.pipeline.join()
        await outbox_drained(self.app.outbox)

    async def grant(self, phone: str, *, can_reply: bool) -> None:
        ctx = owner_ctx(self.app.deps)
        result = await self.app.catalog.for_context(ctx).call(
            "whatsapp_manage_permission",
            {"action": "grant", "phone_number": phone, "can_reply": can_reply},
            ctx,
        )
        assert "error" not in result, result


def _responder(kit_answers: list[Any]) -> Callable[[Request], Any]:
    def respond(req: Request) -> Any:
        if kit_answers:
            answer = kit_answers.pop(0)
            return answer(req) if callable(answer) else answer
        return "reply from the agent"

    return respond


@pytest.fixture
async def kit(app_db: AppDb, tmp_path: Path) -> AsyncIterator[Kit]:
    answers: list[Any] = []
    model = ScriptedModel(_responder(answers))
    clients: list[FakeClient] = []

    def factory(path: str) -> FakeClient:
        clients.append(FakeClient(path))
        return clients[-1]

    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"wa_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        whatsapp_enabled=True,
        owner_phone=OWNER,
    )
    features = [contributing(Parts(tools=((MANAGE_CRONJOB, always),)))]  # a tool that writes
    whatsapp = whatsapp_entry(factory, burst_seconds=0.2, health_every=3600)
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[], features=features,
        registry=replaced(REGISTRY, whatsapp),
    ) as app:  # fmt: skip
        kit = Kit(app, clients[0], model, answers)
        await kit.client.emit(Connected())
        try:
            yield kit
        finally:
            await app.database.client.drop_database(settings.mongodb_db)
