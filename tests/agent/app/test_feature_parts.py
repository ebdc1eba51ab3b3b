"""Features contribute parts and the root assembles them once: a feature's command,
interceptor and status section reach the owner, a later feature gets the services of
an earlier one, its burst rules and owner listeners are built in, the parts that need
the agent start once it exists, nothing is registered after, and the features stop in
reverse order."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import Core, Feature, FeatureContext, Parts, Services
from agent.app.status import status_data
from agent.context import RunContext
from agent.owner import OwnerPrefs
from channels.types import InboundMessage, Reply
from tests.databases import AppDb
from tests.fakes.chat_app import chat_app
from tests.fakes.features import providing
from tests.fakes.scripted import ScriptedModel


class StandInAlerts:
    """An alert router as a later feature sees it."""


def recording(order: list[str], seen: list[Services], started: list[Core]) -> Feature:
    async def ping(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        return [Reply("pong")]

    async def catch(message: InboundMessage, ctx: RunContext) -> list[Reply] | None:
        return [Reply("intercepted")] if message.text == "catch me" else None

    async def section() -> dict[str, Any]:
        return {"recording": {"ok": True}}

    async def start(core: Core) -> None:
        started.append(core)

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        seen.append(ctx.services)
        yield Parts(
            commands={"/ping": ping},
            interceptors=(lambda core: catch,),
            status=(section,),
            start=start,
        )
        order.append("the recording feature stopped")

    return feature


def stopping(order: list[str]) -> Feature:
    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts()
        order.append("the first feature stopped")

    return feature


async def test_parts_are_assembled_once_and_features_stop_in_reverse(
    app_db: AppDb, tmp_path: Path
) -> None:
    alerts = StandInAlerts()
    order: list[str] = []
    seen: list[Services] = []
    started: list[Core] = []
    features = [stopping(order), providing(alerts=alerts), recording(order, seen, started)]
    model = ScriptedModel(lambda r: "agent answer")
    name = f"parts_{uuid.uuid4().hex[:8]}"
    async with chat_app(app_db, name, model, tmp_path, features=features) as chat:
        app = chat.app
        assert [services.alerts for services in seen] == [alerts]  # an earlier feature's
        assert app.deps.alerts is alerts
        assert [(core.deps, core.agent) for core in started] == [(app.deps, app.agent)]
        assert await chat.ask("/ping") == ["pong"]
        assert await chat.ask("catch me") == ["intercepted"]
        assert await chat.ask("hello") == ["agent answer"]
        assert (await status_data(app))["recording"] == {"ok": True}
        [status] = await chat.ask("/status")
        assert status.startswith("Model: ")
        assert order == []
        await app.database.client.drop_database(name)
    assert order == ["the recording feature stopped", "the first feature stopped"]


async def test_a_feature_that_yields_twice_is_refused_at_its_stop(
    app_db: AppDb, tmp_path: Path
) -> None:
    order: list[str] = []

    async def twice(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts()
        yield Parts()

    model = ScriptedModel(lambda r: "agent answer")
    name = f"parts_{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError, match="yielded more than once"):
        async with chat_app(
            app_db, name, model, tmp_path, features=[stopping(order), twice]
        ) as chat:
            await chat.app.database.client.drop_database(name)
    assert order == ["the first feature stopped"]  # the features before it still stop


async def test_declared_burst_rules_and_owner_listeners_are_assembled_then_fixed(
    app_db: AppDb, tmp_path: Path
) -> None:
    """A feature declares a channel's burst rule and a listener of the owner's settings;
    the root builds the pipeline and the owner's listeners from them once, and nothing
    can be registered on the running app afterwards."""
    heard: list[tuple[str, str]] = []

    async def timezone_heard(old: OwnerPrefs, new: OwnerPrefs) -> None:
        heard.append((old.timezone, new.timezone))

    async def bursty(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts(burst_rules={"console": lambda m: 0.5}, owner_listeners=(timezone_heard,))

    model = ScriptedModel(lambda r: "agent answer")
    name = f"parts_{uuid.uuid4().hex[:8]}"
    async with chat_app(app_db, name, model, tmp_path, features=[bursty]) as chat:
        app = chat.app
        # Typed quickly, answered as one exchange: the declared rule is the pipeline's.
        assert await chat.chat.say("hi") and await chat.chat.say("are you there?")
        await app.pipeline.join()
        assert chat.chat.texts() == ["agent answer"]
        assert len(model.requests) == 1
        assert model.requests[0].messages[-1].text.endswith("hi\nare you there?")

        await app.deps.owner.update(timezone="Europe/Berlin")
        assert heard == [("UTC", "Europe/Berlin")]
        with pytest.raises(RuntimeError, match="once the app is assembled"):
            app.deps.owner.listen(timezone_heard)
        await app.database.client.drop_database(name)
