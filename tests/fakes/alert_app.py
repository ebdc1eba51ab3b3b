"""A whole app for alert and SMS tests: fake Twilio, a recording chat channel, a clock.

The app runs on the test SecantusDB server with the alerts feature and no timer
loop: tests move the clock and call ``tick()``, so every escalation step is exact.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from twilio.request_validator import RequestValidator

from agent.alerts.policy import RoutingPolicy
from agent.alerts.router import AlertRouter
from agent.app.core import App, Feature, build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.http import make_web_app
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.fakes.twilio_api import FakeTwilio

OWNER_PHONE = "+15550100100"
OWNER_TG = 4242
FROM_NUMBER = "+15550199999"
ADMIN = "admin-token-0123456789"
PUBLIC_URL = "https://wk.example.test"
"""``PUBLIC_BASE_URL``: Twilio signs the URL it calls, never the one our Host header names."""
START = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)  # a Thursday


@dataclass
class Harness:
    app: App
    clock: FakeClock
    twilio: FakeTwilio
    chat: RecordingChannel
    model: ScriptedModel
    client: TestClient[Any, Any]
    extra_chats: list[RecordingChannel] = field(default_factory=list)

    @property
    def router(self) -> AlertRouter:
        router = self.app.deps.alerts
        assert isinstance(router, AlertRouter)
        return router

    @property
    def sms(self) -> list[str]:
        return self.twilio.bodies_sent

    async def tick(self, **advance: float) -> int:
        if advance:
            self.clock.advance(**advance)
        return await self.router.tick()

    async def settle(self) -> None:
        await self.app.pipeline.join()

    async def sms_in(
        self, text: str, *, sender: str = OWNER_PHONE, sid: str | None = None, sign: bool = True
    ) -> Any:
        """Post an inbound SMS to the webhook the way Twilio does, signed or not."""
        form = {
            "MessageSid": sid or f"SM{uuid.uuid4().hex}",
            "AccountSid": self.twilio.account_sid,
            "From": sender,
            "To": FROM_NUMBER,
            "Body": text,
            "NumMedia": "0",
        }
        public = (self.app.settings.public_base_url or PUBLIC_URL).rstrip("/")
        url = f"{public}/webhooks/twilio/sms"
        headers = {}
        if sign:
            headers["X-Twilio-Signature"] = RequestValidator(
                self.twilio.auth_token
            ).compute_signature(url, form)
        resp = await self.client.post("/webhooks/twilio/sms", data=form, headers=headers)
        await self.settle()
        return resp


@contextlib.asynccontextmanager
async def alert_app(
    app_db: AppDb,
    *,
    db_name: str | None = None,
    clock: FakeClock | None = None,
    policy: RoutingPolicy | None = None,
    telegram: bool = True,
    extra_chats: tuple[str, ...] = (),
    twilio: FakeTwilio | None = None,
    model: ScriptedModel | None = None,
    features: tuple[Feature, ...] = (),
    **settings: Any,
) -> AsyncIterator[Harness]:
    """Build the app with the alerts feature (plus ``features``) on a fresh database."""
    clock = clock or FakeClock(START)
    model = model or ScriptedModel(lambda _req: "agent answer")
    async with contextlib.AsyncExitStack() as stack:
        if twilio is None:
            twilio = await stack.enter_async_context(FakeTwilio())
        values: dict[str, Any] = {
            "mongodb_uri": app_db.mongodb_uri,
            "data_dir": Path(stack.enter_context(tempfile.TemporaryDirectory())),
            "mongodb_db": db_name or f"alerts_{uuid.uuid4().hex[:10]}",
            "owner_phone": OWNER_PHONE,
            "owner_telegram_ids": [OWNER_TG],
            "twilio_account_sid": twilio.account_sid,
            "twilio_auth_token": twilio.auth_token,
            "twilio_from_number": FROM_NUMBER,
            "twilio_api_base_url": twilio.url,
            # Paced like a short code: tests of SMS pacing build their own channel.
            "twilio_segments_per_second": 1000,
            "admin_token": ADMIN,
            "public_base_url": PUBLIC_URL,
            "openai_api_key": "sk-test",
        }
        values.update(settings)
        chat = RecordingChannel("telegram", sender=OWNER_TG, clock=clock)
        extras = [RecordingChannel(name, sender=OWNER_TG, clock=clock) for name in extra_chats]
        channels = ([chat] if telegram else []) + extras
        options = AlertingOptions(background=False, policy=policy or RoutingPolicy())
        app = await stack.enter_async_context(
            build_app(
                make_settings(**values),
                embedded=app_db.server,
                model=model,
                channels=list(channels),
                clock=clock,
                features=[alerting(options), *features],
            )
        )
        if db_name is None:  # a named database outlives the app (restart tests)
            stack.push_async_callback(app.database.client.drop_database, values["mongodb_db"])
        client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
        await client.start_server()
        stack.push_async_callback(client.close)
        yield Harness(app, clock, twilio, chat, model, client, extras)
