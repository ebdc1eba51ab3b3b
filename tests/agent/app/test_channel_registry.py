"""A channel joins the app through its registry entry alone (``agent.app.registry``).

The pigeon post (``tests.fakes.pigeon_channel``) is known to no module of the project:
given as one more entry of the registry, it starts, its webhook is mounted, its owner
is recognised, the agent's reply goes back on it, an alert reaches the owner there, and
a stranger's letter is not answered. The real app, with the OpenAI adapter pointed at
the fake model server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.http import make_web_app
from agent.app.registry import REGISTRY, replaced
from agent.llm.openai.model import OpenAIModel
from channels.registry import ChannelName
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.pigeon_channel import PIGEON, WEBHOOK, PigeonChannel, pigeon_entry
from tests.waiting import until

__all__ = ["openai_api"]  # a fixture, imported for pytest

OWNER = "+15550100100"
STRANGER = "+15550177777"
ADMIN = "admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
async def pigeon_app(
    app_db: AppDb, tmp_path: Path, openai_api: FakeOpenAI
) -> AsyncIterator[tuple[App, TestClient[Any, Any]]]:
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"pigeon_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        owner_phone=OWNER,
        admin_token=ADMIN,
    )
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    features = [alerting(AlertingOptions(background=False))]
    registry = replaced(REGISTRY, pigeon_entry())
    async with build_app(
        settings,
        embedded=app_db.server,
        model=model,
        channels=[],
        features=features,
        registry=registry,
    ) as app:
        client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
        await client.start_server()
        try:
            yield app, client
        finally:
            await client.close()
            await app.database.client.drop_database(settings.mongodb_db)
    await model.aclose()


def _loft(app: App) -> PigeonChannel:
    loft = app.channels[PIGEON]
    assert isinstance(loft, PigeonChannel)
    return loft


async def test_a_registry_entry_alone_carries_a_message_in_a_reply_and_an_alert_out(
    pigeon_app: tuple[App, TestClient[Any, Any]], openai_api: FakeOpenAI
) -> None:
    app, client = pigeon_app
    loft = _loft(app)
    assert PIGEON not in set(ChannelName)  # nothing in the project names it
    assert app.database.owns_server  # as scripts/run starts it: the embedded server's own

    # In: the loft's webhook, mounted from the entry; the owner, by the entry's rules.
    openai_api.reply_text("Coo. The loft is fine.")
    letter = {"id": "L1", "from": OWNER, "text": "how is the loft?"}
    resp = await client.post(WEBHOOK, json=letter)
    assert resp.status == 200 and (await resp.json()) == {"stored": True}
    await app.pipeline.join()
    assert openai_api.last_words(len(openai_api.bodies) - 1) == "how is the loft?"

    # Out: the agent's reply flies back to the owner's chat on the pigeon post.
    assert [(m.chat_id, m.text) for m in loft.flown] == [(OWNER, "Coo. The loft is fine.")]

    # An alert: the pigeon post is the owner's only chat, so the alert flies there.
    await app.deps.owner.update(quiet_hours=[])  # the default would hold it at night
    alert = {"severity": "warning", "title": "Loft door open", "dedupe_key": "loft-door"}
    resp = await client.post("/api/alerts", json=alert, headers=AUTH)
    assert resp.status == 201
    await until(lambda: len(loft.flown) == 2, "the alert on the pigeon post")
    sent = loft.flown[1]
    assert sent.chat_id == OWNER and "Loft door open" in sent.text
    assert sent.idempotency_key.endswith(f":{PIGEON}")
    assert not sent.buttons  # buttons are Telegram's (its entry's delivery), not the pigeon's


async def test_a_stranger_on_the_new_channel_is_not_answered(
    pigeon_app: tuple[App, TestClient[Any, Any]], openai_api: FakeOpenAI
) -> None:
    app, client = pigeon_app
    letter = {"id": "L2", "from": STRANGER, "text": "let me in"}
    resp = await client.post(WEBHOOK, json=letter)
    assert (await resp.json()) == {"stored": True}
    await app.pipeline.join()
    assert _loft(app).flown == [] and openai_api.bodies == []
    row = await app.deps.db["inbox"].find_one({"channel": PIGEON})
    assert row is not None and row["stranger"] is True and row["text"] == ""


def test_the_sms_entry_declares_the_length_the_channel_cuts_at() -> None:
    """A text that must arrive whole is split at the entry's ``whole_text`` before it is
    queued; the channel cuts a longer one. Both must be Twilio's limit."""
    from agent.app.registry import SMS
    from channels.sms import MAX_BODY

    assert SMS.rules.delivery.whole_text == MAX_BODY == 1600
