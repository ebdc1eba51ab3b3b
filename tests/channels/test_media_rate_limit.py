"""A contact over the message rate gets no model call, so its photo is not downloaded
either: media is fetched only for a message the model will read."""

from __future__ import annotations

import os
import time

from agent.conversation.dispatch import SLOW_DOWN
from tests.channels.media_kit import gridfs_files, media_of
from tests.channels.whatsapp_kit import ALICE, Kit, kit
from tests.fakes.whatsapp import image_message, jid, message_event

__all__ = ["kit"]  # the fixture, imported for pytest


async def _photo(kit: Kit, id: str) -> bytes:
    data = os.urandom(4_000)
    kit.client.host(data)
    now = int(time.time())  # the rate counts what arrived in the last minute
    event = message_event(jid(ALICE), jid(ALICE), message=image_message(data), id=id, timestamp=now)
    await kit.client.emit(event)
    await kit.settle()  # handled before the next one arrives: an exchange of its own
    return data


async def test_a_contact_over_the_rate_has_its_photo_left_undownloaded(kit: Kit) -> None:
    kit.app.settings.contact_messages_per_minute = 1
    await kit.grant(ALICE, can_reply=True)
    await _photo(kit, "WITHIN")
    assert len(kit.client.downloads) == 1 and len(kit.model.requests) == 1
    await _photo(kit, "OVER")
    assert len(kit.client.downloads) == 1 and len(kit.model.requests) == 1
    [item] = await media_of(kit.app.deps.db, external_id="OVER")
    assert item["status"] == "pending"  # never fetched
    assert await gridfs_files(kit.app.deps.db) == 1
    alice = f"{ALICE[1:]}@s.whatsapp.net"
    assert kit.client.sent[-1] == (alice, SLOW_DOWN)
