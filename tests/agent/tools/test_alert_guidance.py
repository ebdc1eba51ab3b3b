"""The prompt's raise_alert line says whether SMS can page, so the model never promises
an SMS that cannot go (seen when a capable model played the product's model)."""

from __future__ import annotations

from typing import Any

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.tools.alerts import RAISE_ALERT
from tests.conftest import make_settings
from tests.contexts import agent_deps, owner_ctx
from tests.fakes.channel import RecordingChannel


async def test_without_sms_the_line_says_chats_only(
    db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    deps = agent_deps(make_settings(owner_phone="+4915100000001"), db, http)
    line = RAISE_ALERT.guidance_in(owner_ctx(deps))
    assert "SMS is not set up" in line and "pages by SMS" not in line


async def test_with_sms_and_an_owner_number_critical_pages(
    db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> None:
    sms = RecordingChannel("sms")
    settings = make_settings(owner_phone="+4915100000001")
    deps = agent_deps(settings, db, http, channels={"sms": sms})
    assert "critical pages by SMS" in RAISE_ALERT.guidance_in(owner_ctx(deps))
    no_number = agent_deps(make_settings(), db, http, channels={"sms": sms})
    assert "SMS is not set up" in RAISE_ALERT.guidance_in(owner_ctx(no_number))
