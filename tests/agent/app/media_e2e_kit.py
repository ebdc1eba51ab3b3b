"""Shared by the media end-to-end tests: the whole app on one channel's fake, its model
built from the settings by the real factory against one provider's fake.

A ``Driver`` speaks the channel's wire format to the app (Bot API updates with
``getFile`` and file downloads, neonize protobuf events with ``download_any``, signed
Twilio webhooks with ``MediaUrl0``) and reads back what the app sent on that channel.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from aiohttp.test_utils import TestClient, TestServer
from neonize.proto.Neonize_pb2 import Connected
from twilio.request_validator import RequestValidator

from agent.app.application import App, Feature
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.http import make_web_app
from agent.app.registry import REGISTRY, ChannelEntry, replaced, whatsapp_entry
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.twilio_api import FakeTwilio
from tests.fakes.whatsapp import FakeClient, image_message, jid, message_event, voice_message
from tests.waiting import until

Provider = Literal["gemini", "openai"]
ChannelName = Literal["telegram", "whatsapp", "sms"]
OWNER_TG = 4242
OWNER_WA = "+4915100000001"  # the linked account is the owner's own number
OWNER_SMS = "+15550100100"
SMS_FROM = "+15550199999"
PUBLIC_URL = "https://wk.example.test"
SMS_WEBHOOK = "/webhooks/twilio/sms"


class Driver(Protocol):
    """Sends as someone on one channel; each send returns the message's external id."""

    async def photo(self, data: bytes, caption: str) -> str: ...
    async def voice(self, data: bytes, seconds: int) -> str: ...
    async def text(self, text: str) -> str: ...
    def replies(self) -> list[str]: ...


@dataclass
class TelegramDriver:
    fake: FakeTelegram
    sender: int = OWNER_TG

    async def _push(self, **content: Any) -> str:
        update = self.fake.push_content(self.sender, **content)
        await self.fake.wait_confirmed(update["update_id"])
        return str(update["update_id"])

    async def photo(self, data: bytes, caption: str) -> str:
        hosted = self.fake.files.add(data, folder="photos", ext="jpg")
        size = {"file_id": hosted.file_id, "file_unique_id": "p1", "width": 800,
                "height": 600, "file_size": len(data)}  # fmt: skip
        return await self._push(photo=[size], caption=caption)

    async def voice(self, data: bytes, seconds: int) -> str:
        hosted = self.fake.files.add(data, folder="voice", ext="oga")
        voice = {"file_id": hosted.file_id, "file_unique_id": "v1", "duration": seconds,
                 "mime_type": "audio/ogg", "file_size": len(data)}  # fmt: skip
        return await self._push(voice=voice)

    async def text(self, text: str) -> str:
        return await self._push(text=text)

    def replies(self) -> list[str]:
        return [sent.visible for sent in self.fake.sent]


@dataclass
class WhatsAppDriver:
    client: FakeClient
    sender: str = OWNER_WA
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def _emit(self, **kw: Any) -> str:
        id = f"3EB0E2E{next(self._ids):06d}"
        who = jid(self.sender)
        await self.client.emit(message_event(who, who, id=id, **kw))
        return id

    async def photo(self, data: bytes, caption: str) -> str:
        self.client.host(data)
        return await self._emit(message=image_message(data, caption))

    async def voice(self, data: bytes, seconds: int) -> str:
        self.client.host(data)
        return await self._emit(message=voice_message(data, seconds=seconds))

    async def text(self, text: str) -> str:
        return await self._emit(text=text)

    def replies(self) -> list[str]:
        chat = f"{self.sender.lstrip('+')}@s.whatsapp.net"
        return [text for to, text in self.client.sent if to == chat]


@dataclass
class SmsDriver:
    twilio: FakeTwilio
    http: TestClient[Any, Any]
    sender: str = OWNER_SMS

    async def _post(self, body: str, media: list[tuple[str, str]]) -> str:
        sid = f"MM{uuid.uuid4().hex}"
        form = {"MessageSid": sid, "AccountSid": self.twilio.account_sid, "From": self.sender,
                "To": SMS_FROM, "Body": body, "NumMedia": str(len(media))}  # fmt: skip
        for i, (url, mime) in enumerate(media):
            form[f"MediaUrl{i}"], form[f"MediaContentType{i}"] = url, mime
        signature = RequestValidator(self.twilio.auth_token).compute_signature(
            PUBLIC_URL + SMS_WEBHOOK, form
        )
        resp = await self.http.post(
            SMS_WEBHOOK, data=form, headers={"X-Twilio-Signature": signature}
        )
        assert resp.status == 200, await resp.text()
        return sid

    async def photo(self, data: bytes, caption: str) -> str:
        url = self.twilio.add_media(data, "image/jpeg")
        return await self._post(caption, [(url, "image/jpeg")])

    async def voice(self, data: bytes, seconds: int) -> str:
        raise NotImplementedError("Twilio MMS carries images here, not voice notes")

    async def text(self, text: str) -> str:
        return await self._post(text, [])

    def replies(self) -> list[str]:
        return self.twilio.bodies_sent


@dataclass
class Rig:
    app: App
    provider: Provider
    driver: Driver
    gemini: FakeGemini
    openai: FakeOpenAI
    whatsapp: FakeClient | None = None

    def answer(self, text: str) -> None:
        """The model's next answer, on the provider in use."""
        if self.provider == "gemini":
            self.gemini.reply_text(text)
        else:
            self.openai.reply_text(text)

    async def exchange(self, send: Callable[[], Any], driver: Driver | None = None) -> str:
        """Send (``await send()``) and wait for one more reply; the external id."""
        driver = driver or self.driver
        before = len(driver.replies())
        external_id = str(await send())
        await until(lambda: len(driver.replies()) > before)
        await self.app.pipeline.join()
        return external_id

    async def grant(self, phone: str) -> None:
        """Make ``phone`` a WhatsApp contact the agent may read and answer."""
        ctx = owner_ctx(self.app.deps)
        result = await self.app.catalog.for_context(ctx).call(
            "whatsapp_manage_permission",
            {"action": "grant", "phone_number": phone, "can_reply": True},
            ctx,
        )
        assert "error" not in result, result


def provider_settings(provider: Provider, gemini: FakeGemini, openai: FakeOpenAI) -> dict[str, Any]:
    if provider == "gemini":
        return {"llm_provider": "gemini", "gemini_api_key": GEMINI_KEY,
                "gemini_base_url": gemini.base_url}  # fmt: skip
    return {"llm_provider": "openai", "openai_api_key": OPENAI_KEY,
            "openai_base_url": openai.base_url}  # fmt: skip


@contextlib.asynccontextmanager
async def media_rig(
    app_db: AppDb,
    tmp_path: Path,
    channel: ChannelName,
    provider: Provider,
    settings: Mapping[str, Any] | None = None,
) -> AsyncIterator[Rig]:
    """The app from ``build_app`` with only ``channel`` and a model on ``provider``
    (``settings``: more values for its settings)."""
    async with contextlib.AsyncExitStack() as stack:
        gemini = await stack.enter_async_context(FakeGemini())
        openai = await stack.enter_async_context(FakeOpenAI())
        db_name = f"e2e_{uuid.uuid4().hex[:10]}"
        values: dict[str, Any] = {
            "mongodb_uri": app_db.mongodb_uri,
            "mongodb_db": db_name,
            "data_dir": tmp_path,
            **provider_settings(provider, gemini, openai),
            **(settings or {}),
        }
        features: list[Feature] = []
        registry: tuple[ChannelEntry, ...] = REGISTRY
        clients: list[FakeClient] = []
        twilio: FakeTwilio | None = None
        if channel == "telegram":
            telegram = await stack.enter_async_context(FakeTelegram())
            values |= {"telegram_bot_token": TOKEN, "telegram_api_base_url": telegram.url,
                       "owner_telegram_ids": [OWNER_TG]}  # fmt: skip
        elif channel == "whatsapp":

            def factory(path: str) -> FakeClient:
                clients.append(FakeClient(path))
                return clients[-1]

            values |= {"whatsapp_enabled": True, "owner_phone": OWNER_WA}
            registry = replaced(
                REGISTRY, whatsapp_entry(factory, burst_seconds=0.05, health_every=3600)
            )
        else:
            twilio = await stack.enter_async_context(FakeTwilio())
            values |= {"twilio_account_sid": twilio.account_sid,
                       "twilio_auth_token": twilio.auth_token, "twilio_from_number": SMS_FROM,
                       "twilio_api_base_url": twilio.url, "public_base_url": PUBLIC_URL,
                       "twilio_segments_per_second": 1000,
                       "owner_phone": OWNER_SMS}  # fmt: skip
            features.append(alerting(AlertingOptions(background=False)))
        app = await stack.enter_async_context(
            build_app(
                make_settings(**values),
                embedded=app_db.server,
                features=features,
                registry=registry,
            )
        )
        stack.push_async_callback(app.database.client.drop_database, db_name)
        driver: Driver
        if channel == "telegram":
            driver = TelegramDriver(telegram)
        elif channel == "whatsapp":
            await clients[0].emit(Connected())
            driver = WhatsAppDriver(clients[0])
        else:
            assert twilio is not None
            http: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
            await http.start_server()
            stack.push_async_callback(http.close)
            driver = SmsDriver(twilio, http)
        yield Rig(app, provider, driver, gemini, openai, clients[0] if clients else None)
