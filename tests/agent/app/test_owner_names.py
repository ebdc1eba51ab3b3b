"""The owner's name reads as a person writes it, not as Python: ``Owner (Telegram 4242)``
in the log line, ``/status`` and ``watchkeeper pair --list``; ``/api/status`` carries the
id, name and handle as fields (issue 39, item 9)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.features.pairing import owners_status
from agent.app.status import status_text
from agent.cli.pair import listing
from agent.conversation.pairing import Pairing
from agent.reach import Owners
from storage.repos.pairing import PairingStore
from tests.conftest import make_settings
from tests.fakes.clock import FakeClock

UTC_ZONE = ZoneInfo("UTC")
REPR = ("name=", "'Owner'", "(id ")


@pytest.mark.clock(datetime(2026, 11, 28, 14, 2, tzinfo=UTC))
async def test_an_owner_with_only_a_display_name_reads_as_a_name(
    db: AsyncDatabase[dict[str, Any]], clock: FakeClock
) -> None:
    settings = make_settings(owner_telegram_ids="77")
    store = PairingStore(db, clock)
    offered = (await store.offer(4242, "4242", "Owner")).pending
    assert offered is not None
    assert offered.command("scripts/run").endswith(" to make Owner (Telegram 4242) the owner")
    owner = await store.approve(offered.code)
    assert owner is not None and owner.who() == "Owner (Telegram 4242)"

    lines = await listing(store, settings)
    assert lines[0] == "owner: Telegram 77 (OWNER_TELEGRAM_IDS)"
    assert lines[1].startswith("owner: Owner (Telegram 4242), paired ")

    section = await owners_status(settings, Pairing(store, Owners(settings, store)))
    assert section["telegram"] == [
        {"id": 77, "source": "OWNER_TELEGRAM_IDS"},
        {"id": 4242, "name": "Owner", "handle": "", "source": "paired"},
    ]
    data = {"owners": section, "outbox": {"pending": 0, "failed": 0}}
    line = next(
        x
        for x in status_text(data, "m", tz=UTC_ZONE, now=clock.now).splitlines()
        if x.startswith("Telegram")
    )
    assert line == "Telegram owners: Telegram 77; Owner (Telegram 4242), paired"
    for said in (*lines, line):
        assert not any(bit in said for bit in REPR), said
