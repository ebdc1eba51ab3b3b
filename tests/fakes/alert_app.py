"""A whole app for alert and SMS tests: fake Twilio, a recording chat channel, a clock.

The app runs on the test SecantusDB server with the alerts feature and no timer
loop: tests move the clock and call ``tick()``, so every escalation step is exact.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from twilio.request_validator import RequestValidator

from agent.alerts.policy import RoutingPolicy
from agent.alerts.router import AlertRouter
from agent.app.alerts_feature import AlertingOptions, alerting
from agent.app.core import App, Feature, build_app
from agent.app.http import make_web_app
from channels.types import (
    InboundMessage,
    InboundSink,
    OutboundMessage,
    SendError,
    SendResult,
)
from tests.conftest import make_settings
from tests.fakes.scripted import ScriptedModel
from tests.fakes.twilio_api import FakeTwilio

OWNER_PHONE = "+15550100100"
OWNER_TG = 4242
FROM_NUMBER = "+15550199999"
ADMIN = "admin-token-123"
START = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)  # a Thursday


class ManualClock:
    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


class ChatChannel:
    """A chat transport that records what it is asked to send (or fails on demand)."""

    def __init__(self, name: str = "telegram") -> None:
        self.name = name
        self.sent: list[OutboundMessage] = []
        self.failing = False
        """Sends fail while the channel still claims to be connected."""
        self.down = False
        """The channel says it is disconnected (and sends fail)."""
        self.sink: InboundSink | None = None
        self._ids = itertools.count(1000)
        self._updates = itertools.count(1)

    async def start(self, sink: InboundSink) -> None:
        self.sink = sink

    async def stop(self) -> None:
        self.sink = None

    async def send(self, message: OutboundMessage) -> SendResult:
        if self.failing or self.down:
            raise SendError(f"{self.name} is down", retryable=True)
        self.sent.append(message)
        return SendResult(external_ids=(str(next(self._ids)),))

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"connected": not self.down}

    def texts(self) -> list[str]:
        return [m.text for m in self.sent]

    async def say(self, text: str, *, sender: int = OWNER_TG, reply_to: str | None = None) -> bool:
        assert self.sink is not None
        return await self.sink(
            InboundMessage(
                channel=self.name,
                external_id=f"u{next(self._updates)}",
                chat_id=str(sender),
                sender_id=str(sender),
                text=text,
                received_at=START,
                reply_to=reply_to,
            )
        )


@dataclass
class Harness:
    app: App
    clock: ManualClock
    twilio: FakeTwilio
    chat: ChatChannel
    model: ScriptedModel
    client: TestClient[Any, Any]
    extra_chats: list[ChatChannel] = field(default_factory=list)

    @property
    def router(self) -> AlertRouter:
        router = self.app.deps.services["alerts"]
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
        url = str(self.client.make_url("/webhooks/twilio/sms"))
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
    mongo_server: str,
    *,
    db_name: str | None = None,
    clock: ManualClock | None = None,
    policy: RoutingPolicy | None = None,
    telegram: bool = True,
    extra_chats: tuple[str, ...] = (),
    twilio: FakeTwilio | None = None,
    model: ScriptedModel | None = None,
    features: tuple[Feature, ...] = (),
    **settings: Any,
) -> AsyncIterator[Harness]:
    """Build the app with the alerts feature (plus ``features``) on a fresh database."""
    clock = clock or ManualClock()
    model = model or ScriptedModel(lambda _req: "agent answer")
    async with contextlib.AsyncExitStack() as stack:
        if twilio is None:
            twilio = await stack.enter_async_context(FakeTwilio())
        values: dict[str, Any] = {
            "mongodb_uri": mongo_server + "?directConnection=true",
            "mongodb_db": db_name or f"alerts_{uuid.uuid4().hex[:10]}",
            "owner_phone": OWNER_PHONE,
            "owner_telegram_ids": [OWNER_TG],
            "twilio_account_sid": twilio.account_sid,
            "twilio_auth_token": twilio.auth_token,
            "twilio_from_number": FROM_NUMBER,
            "twilio_api_base_url": twilio.url,
            "admin_token": ADMIN,
            "openai_api_key": "sk-test",
        }
        values.update(settings)
        chat = ChatChannel("telegram")
        extras = [ChatChannel(name) for name in extra_chats]
        channels = ([chat] if telegram else []) + extras
        options = AlertingOptions(background=False, policy=policy or RoutingPolicy())
        app = await stack.enter_async_context(
            build_app(
                make_settings(**values),
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
