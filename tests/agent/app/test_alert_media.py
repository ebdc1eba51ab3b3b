"""Issue 28, item 5: a photo or voice note the owner sends while an alert is in play
goes to the model with the alert as context, and the media itself: fetched through the
real Telegram path (Bot API fake serving the file), seen by the model (OpenAI fake),
no longer pending in the inbox."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.alerts.router import AlertRouter
from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from tests.agent.app.media_e2e_kit import OWNER_TG, TelegramDriver, provider_settings, until
from tests.agent.conversation.media_kit import OGG, phone_photo
from tests.channels.media_kit import media_of, stored_bytes
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI, decode_data_url
from tests.fakes.telegram_api import TOKEN, FakeTelegram

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

PHOTO = phone_photo((800, 600))  # small and without EXIF: sent exactly as it came
TRANSCRIPT = "Is this the valve you meant?"
ALERT_SECTION = "## The alert this message is about"


@dataclass
class Rig:
    app: App
    openai: FakeOpenAI
    telegram: TelegramDriver

    @property
    def router(self) -> AlertRouter:
        router = self.app.deps.alerts
        assert isinstance(router, AlertRouter)
        return router

    async def exchange(self, send: Any) -> str:
        """Send (``await send()``), wait for the answer; the message's external id."""
        before = len(self.telegram.replies())
        external_id = str(await send())
        await until(lambda: len(self.telegram.replies()) > before)
        await self.app.pipeline.join()
        return external_id

    def read(self, index: int) -> str:
        """The system prompt and the newest user message's text parts (the words, then
        the note on them, which carries the alert the message is about), as sent."""
        messages = self.openai.bodies[index]["messages"]
        [system] = [m for m in messages if m["role"] == "system"]
        newest = [m for m in messages if m["role"] == "user"][-1]["content"]
        parts = newest if isinstance(newest, list) else [{"type": "text", "text": newest}]
        texts = [p["text"] for p in parts if p.get("type") == "text"]
        return "\n".join([str(system["content"]), *texts])


@contextlib.asynccontextmanager
async def rig(app_db: AppDb, tmp_path: Path) -> AsyncIterator[Rig]:
    """The whole app: real Telegram channel on the Bot API fake, OpenAI fake, alerts."""
    async with contextlib.AsyncExitStack() as stack:
        telegram = await stack.enter_async_context(FakeTelegram())
        openai = await stack.enter_async_context(FakeOpenAI())
        gemini = await stack.enter_async_context(FakeGemini())  # unused: OpenAI is chosen
        db_name = f"alert_media_{uuid.uuid4().hex[:10]}"
        settings = make_settings(
            mongodb_uri=app_db.mongodb_uri,
            mongodb_db=db_name,
            data_dir=tmp_path,
            telegram_bot_token=TOKEN,
            telegram_api_base_url=telegram.url,
            owner_telegram_ids=[OWNER_TG],
            **provider_settings("openai", gemini, openai),
        )
        features = [alerting(AlertingOptions(background=False))]
        app = await stack.enter_async_context(
            build_app(settings, embedded=app_db.server, features=features)
        )
        stack.push_async_callback(app.database.client.drop_database, db_name)
        # No quiet hours: the default (22:00-07:00) would hold the warning at night.
        await app.deps.owner.update(quiet_hours=[])
        yield Rig(app, openai, TelegramDriver(telegram))


async def _open_alert(rig: Rig) -> str:
    """An open alert, sent to the owner's Telegram chat; its code."""
    alert = await rig.router.raise_alert(
        severity="warning", title="Boiler pressure low", body="0.6 bar, expected 1.5"
    )
    await until(lambda: any("Boiler pressure low" in t for t in rig.telegram.replies()))
    return str(alert.code)


async def test_a_photo_about_an_alert_reaches_the_model_with_the_alert(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        code = await _open_alert(r)
        r.openai.reply_text("That gauge reads 0.6 bar: top up the boiler.")
        external_id = await r.exchange(lambda: r.telegram.photo(PHOTO, "what is this?"))
        assert r.telegram.replies()[-1] == "That gauge reads 0.6 bar: top up the boiler."
        [url] = r.openai.image_urls(0)
        assert decode_data_url(url) == ("image/jpeg", PHOTO)
        assert "what is this?" in r.openai.user_text(0)
        system = r.read(0)
        assert ALERT_SECTION in system and f"#{code} [warning] Boiler pressure low" in system
        [item] = await media_of(r.app.deps.db, external_id=external_id)
        assert item["status"] == "stored"
        assert await stored_bytes(r.app.deps.db, item) == PHOTO


async def test_a_voice_note_about_an_alert_is_heard_with_the_alert(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        code = await _open_alert(r)
        r.openai.transcripts.append(TRANSCRIPT)
        r.openai.reply_text("Yes, the red one.")
        external_id = await r.exchange(lambda: r.telegram.voice(OGG, 7))
        assert r.telegram.replies()[-1] == "Yes, the red one."
        [call] = r.openai.transcriptions
        assert call.data == OGG
        assert f"[voice note, 0:07, transcript]: {TRANSCRIPT}" in r.openai.user_text(0)
        assert f"#{code} [warning] Boiler pressure low" in r.read(0)
        [item] = await media_of(r.app.deps.db, external_id=external_id)
        assert item["status"] == "stored" and item["transcript"] == TRANSCRIPT
