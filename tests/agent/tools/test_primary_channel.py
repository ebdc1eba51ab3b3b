"""``manage_settings`` primary_channel (issue 32, item 5): only a channel the owner can
be reached on here is accepted; a refusal says why and names the ones that work, and
nothing else in the same update is stored."""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from agent.tools.settings import MANAGE_SETTINGS
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import call_tool, scheduled_app, tool_call, tool_results

PHONE = "+15550100100"
TG = 4242
BOTH = {"owner_telegram_ids": [TG], "owner_phone": PHONE}


pytestmark = pytest.mark.clock(datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN))


def _app(
    app_db: AppDb,
    tmp_path: Path,
    clock: FakeClock,
    names: tuple[str, ...],
    model: ScriptedModel | None = None,
    **settings: Any,
) -> contextlib.AbstractAsyncContextManager[App]:
    channels = [RecordingChannel(name) for name in names]
    model = model or ScriptedModel(lambda _r: "ok")
    return scheduled_app(
        app_db, tmp_path, model, clock, channels=channels, timezone="Europe/Berlin",
        **settings,
    )  # fmt: skip


async def _settings(app: App, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(app, "manage_settings", **args)
    return result


async def test_sms_without_twilio_is_refused_naming_telegram_and_whatsapp(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock, ("telegram", "whatsapp"), **BOTH) as app:
        refused = await _settings(
            app, action="update", primary_channel="sms", timezone="Asia/Tokyo"
        )
        view = await _settings(app, action="get")
        chosen = await _settings(app, action="update", primary_channel="WhatsApp")
        stored = await app.deps.db["settings"].find_one({"_id": "owner"})
    assert refused == {
        "error": "primary_channel 'sms' cannot be used: SMS is not set up here (TWILIO_* "
        "settings); configured: telegram, whatsapp. Nothing was changed."
    }
    assert view["primary_channel"] is None and view["timezone"] == "Europe/Berlin"
    assert view["configured_channels"] == ["telegram", "whatsapp"]
    assert chosen["success"] is True and chosen["primary_channel"] == "whatsapp"
    assert stored is not None and stored["primary_channel"] == "whatsapp"
    assert "primary_channel_problem" not in chosen


@pytest.mark.parametrize(
    ("names", "settings", "channel", "error"),
    [
        (
            ("console",),
            {},
            "telegram",
            "primary_channel 'telegram' cannot be used: Telegram is not set up here "
            "(TELEGRAM_BOT_TOKEN); no chat channel is configured, so messages go to the "
            "terminal and the log. Nothing was changed.",
        ),
        (
            ("telegram", "whatsapp"),
            {"owner_phone": PHONE},
            "telegram",
            "primary_channel 'telegram' cannot be used: Telegram knows no owner yet "
            "(OWNER_TELEGRAM_IDS, or watchkeeper pair); configured: whatsapp. "
            "Nothing was changed.",
        ),
        (
            ("telegram", "whatsapp"),
            {"owner_telegram_ids": [TG]},
            "whatsapp",
            "primary_channel 'whatsapp' cannot be used: OWNER_PHONE is not set, so WhatsApp "
            "has no owner to write to; configured: telegram. Nothing was changed.",
        ),
        (
            ("telegram",),
            BOTH,
            "email",
            "primary_channel 'email' is not a channel; use one of telegram, whatsapp, sms. "
            "Nothing was changed.",
        ),
    ],
)
async def test_each_reason_a_channel_cannot_be_primary_is_named(
    app_db: AppDb,
    tmp_path: Path,
    clock: FakeClock,
    names: tuple[str, ...],
    settings: dict[str, Any],
    channel: str,
    error: str,
) -> None:
    async with _app(app_db, tmp_path, clock, names, **settings) as app:
        refused = await _settings(app, action="update", primary_channel=channel)
        stored = await app.deps.db["settings"].find_one({"_id": "owner"})
    assert refused == {"error": error}
    assert stored is None


async def test_a_channel_set_up_for_watchkeeper_run_counts_in_the_terminal_chat(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """``watchkeeper chat`` runs only the terminal; the settings say what ``run`` has."""
    async with _app(
        app_db, tmp_path, clock, ("console",), whatsapp_enabled=True, owner_phone=PHONE
    ) as app:
        chosen = await _settings(app, action="update", primary_channel="whatsapp")
        refused = await _settings(app, action="update", primary_channel="sms")
    assert chosen["success"] is True and chosen["configured_channels"] == ["whatsapp"]
    assert "primary_channel_problem" not in chosen
    assert refused["error"].endswith(
        "(TWILIO_* settings); configured: whatsapp. Nothing was changed."
    )


async def test_a_stored_primary_that_no_longer_runs_is_shown_with_where_messages_go(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """Chosen while Telegram ran; after a restart without it, ``get`` says so."""
    async with _app(app_db, tmp_path, clock, ("whatsapp",), **BOTH) as app:
        await app.deps.db["settings"].insert_one({"_id": "owner", "primary_channel": "telegram"})
        await app.deps.owner.load()
        view = await _settings(app, action="get")
    assert view["primary_channel"] == "telegram"
    assert view["primary_channel_problem"] == (
        "Telegram is not set up here (TELEGRAM_BOT_TOKEN); messages go to whatsapp meanwhile"
    )


async def test_the_probe_telegram_as_main_channel_with_no_telegram(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """As it happened: Telegram is not set up, the owner asks for it; the model is told
    it cannot be, and which can, and nothing is stored."""
    model = ScriptedModel(lambda _r: "ok")
    model.responder = sequence(
        tool_call("manage_settings", action="update", primary_channel="telegram"),
        "Telegram is not set up here; WhatsApp is. Shall I use WhatsApp?",
    )
    async with _app(app_db, tmp_path, clock, ("whatsapp",), model, **BOTH) as app:
        await app.agent.respond("otherwise Telegram is fine, make it my main channel", (
            owner_ctx(app.deps)
        ))  # fmt: skip
        stored = await app.deps.db["settings"].find_one({"_id": "owner"})
    [result] = tool_results(model)
    assert result["error"].startswith(
        "primary_channel 'telegram' cannot be used: Telegram is not set up here"
    )
    assert "configured: whatsapp." in result["error"]
    assert stored is None


def test_the_model_is_told_warnings_can_stay_off_sms() -> None:
    """The escalation is the owner's to change by chat: the description says how."""
    assert "warning_sms_after_minutes (0 = warnings never by SMS)" in MANAGE_SETTINGS.description
    schema = MANAGE_SETTINGS.spec().parameters["properties"]
    assert schema["warning_sms_after_minutes"] == {"type": "integer"}
