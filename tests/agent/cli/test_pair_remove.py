"""``watchkeeper pair --remove USER_ID`` unpairs an owner: they are gone from the list and,
at the next refresh, from the owners a running process answers; an id that is not a
paired owner, or one from OWNER_TELEGRAM_IDS, gets a clear error and changes nothing."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.cli.pair import pair
from agent.config import Settings
from agent.conversation.pairing import Pairing
from agent.reach import Owners
from storage.repos.pairing import PairingStore
from tests.conftest import make_settings
from tests.fakes.clock import FakeClock

Db = AsyncDatabase[dict[str, Any]]


def settings_for(mongo_server: str, db: Db, **more: Any) -> Settings:
    return make_settings(
        mongodb_uri=mongo_server + "?directConnection=true", mongodb_db=db.name, **more
    )


async def paired(db: Db, clock: FakeClock, user_id: int, name: str, handle: str = "") -> None:
    store = PairingStore(db, clock)
    offer = (await store.offer(user_id, str(user_id), name, handle=handle)).pending
    assert offer is not None
    assert await store.approve(offer.code) is not None


async def test_removing_a_paired_owner(
    mongo_server: str, db: Db, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(datetime.now(UTC))
    await paired(db, clock, 77, "Ann", "ann")
    settings = settings_for(mongo_server, db)
    store = PairingStore(db, clock)
    owners = Owners(settings, store)
    pairing = Pairing(store, owners)
    await pairing.refresh()
    assert 77 in owners.telegram_ids

    out = io.StringIO()
    assert await pair(settings, None, remove=77, out=out, clock=clock) == 0
    assert "@ann (Telegram 77) is no longer an owner" in out.getvalue()
    listed = io.StringIO()
    assert await pair(settings, None, list_only=True, out=listed, clock=clock) == 0
    assert "77" not in listed.getvalue()
    await pairing.refresh()  # what a running process does every 30 s
    assert 77 not in owners.telegram_ids

    assert await pair(settings, None, remove=77, out=io.StringIO(), clock=clock) == 2
    assert "77 is not a paired owner (nobody is paired)" in capsys.readouterr().err


async def test_an_owner_from_the_settings_is_not_removed_here(
    mongo_server: str, db: Db, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(datetime.now(UTC))
    await paired(db, clock, 78, "Bob")
    settings = settings_for(mongo_server, db, owner_telegram_ids=[42])
    assert await pair(settings, None, remove=42, out=io.StringIO(), clock=clock) == 2
    assert "OWNER_TELEGRAM_IDS" in capsys.readouterr().err
    assert [o.user_id for o in await PairingStore(db, clock).owners()] == [78]
