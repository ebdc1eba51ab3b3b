"""WhatsApp photos and voice notes: real neonize protobuf events through the whole app
(``build_app`` wiring), downloaded with the client's ``download_any``, stored in GridFS
and referenced from the inbox row; caps, contacts, strangers, bursts."""

from __future__ import annotations

import os

from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import Message

from tests.channels.media_kit import gridfs_files, media_of, stored_bytes
from tests.channels.whatsapp_kit import ALICE, BOB, OWNER, Kit, kit
from tests.contexts import owner_ctx
from tests.fakes.whatsapp import image_message, jid, message_event, voice_message

__all__ = ["kit"]  # the fixture, imported for pytest


async def _send(kit: Kit, sender: str, message: Message, id: str) -> None:
    await kit.client.emit(message_event(jid(sender), jid(sender), message=message, id=id))


async def test_owner_photo_and_voice_note_are_stored(kit: Kit) -> None:
    jpeg, ogg = os.urandom(30_000), os.urandom(12_000)
    kit.client.host(jpeg)
    kit.client.host(ogg)
    await _send(kit, OWNER, image_message(jpeg, "the receipt"), "IMG1")
    await kit.settle()
    await _send(kit, OWNER, voice_message(ogg, seconds=7), "VOICE1")
    await kit.settle()
    db = kit.app.deps.db
    [image] = await media_of(db, external_id="IMG1")
    assert (image["kind"], image["mime"], image["size"]) == ("image", "image/jpeg", 30_000)
    assert await stored_bytes(db, image) == jpeg
    [voice] = await media_of(db, external_id="VOICE1")
    assert (voice["kind"], voice["mime"], voice["duration_s"]) == ("audio", "audio/ogg", 7)
    assert await stored_bytes(db, voice) == ogg
    # What neonize was asked to download is the media message itself, thumbnail dropped.
    first, second = kit.client.downloads
    assert first.imageMessage.caption == "the receipt" and not first.imageMessage.JPEGThumbnail
    assert second.audioMessage.PTT and second.audioMessage.seconds == 7
    seen = [r.messages[-1].text for r in kit.model.requests]
    assert seen == ["[Image] the receipt", "[Voice note]"]


async def test_contact_burst_with_photos_fetches_each_once(kit: Kit) -> None:
    await kit.grant(ALICE, can_reply=True)
    photos = [os.urandom(5_000) for _ in range(2)]
    for n, data in enumerate(photos):
        kit.client.host(data)
        await _send(kit, ALICE, image_message(data, f"photo {n}"), f"B{n}")
    await kit.settle()
    db = kit.app.deps.db
    for n, data in enumerate(photos):
        [item] = await media_of(db, external_id=f"B{n}")
        assert await stored_bytes(db, item) == data
    assert len(kit.client.downloads) == 2 and await gridfs_files(db) == 2
    [request] = kit.model.requests  # one exchange for the burst
    assert "[Image] photo 0\n[Image] photo 1" in request.messages[-1].text


async def test_strangers_and_contacts_without_can_read_are_never_fetched(kit: Kit) -> None:
    await kit.grant(BOB, can_reply=True)
    ctx = owner_ctx(kit.app.deps)
    result = await kit.app.catalog.for_context(ctx).call(
        "whatsapp_manage_permission",
        {"action": "update", "phone_number": BOB, "can_read": False},
        ctx,
    )
    assert "error" not in result, result
    data = os.urandom(2_000)
    kit.client.host(data)
    await _send(kit, BOB, image_message(data), "FROM_BOB")
    await _send(kit, "+4930555000111", voice_message(data, seconds=3), "FROM_STRANGER")
    await kit.settle()
    assert kit.client.downloads == [] and kit.model.requests == []
    db = kit.app.deps.db
    assert await media_of(db, external_id="FROM_BOB") == []
    assert await media_of(db, external_id="FROM_STRANGER") == []
    assert await gridfs_files(db) == 0


async def test_caps_announced_and_actual(kit: Kit) -> None:
    long_note = os.urandom(1_000)
    kit.client.host(long_note)
    await _send(kit, OWNER, voice_message(long_note, seconds=3_600), "LONG")
    await kit.settle()
    liar = os.urandom(25_000_000)  # announced as 1 kB, 25 MB once downloaded
    kit.client.host(liar)
    await _send(kit, OWNER, image_message(liar, announced=1_000), "LIAR")
    await kit.settle()
    db = kit.app.deps.db
    [long_item] = await media_of(db, external_id="LONG")
    assert long_item["status"] == "too_large"
    assert long_item["note"] == "[voice note of 60 min: too long to listen to; limit 10 min]"
    [liar_item] = await media_of(db, external_id="LIAR")
    assert liar_item["status"] == "too_large"
    assert len(kit.client.downloads) == 1 and await gridfs_files(db) == 0
    seen = [r.messages[-1].text for r in kit.model.requests]
    assert seen[0] == "[Voice note]\n[voice note of 60 min: too long to listen to; limit 10 min]"
    assert seen[1] == "[Image]\n[photo: too large to look at; limit 20 MB]"


async def test_a_failed_download_is_said_and_not_retried(kit: Kit) -> None:
    await _send(kit, OWNER, image_message(b"never hosted"), "GONE")
    await kit.settle()
    [item] = await media_of(kit.app.deps.db, external_id="GONE")
    assert item["status"] == "failed" and "source" not in item
    assert kit.model.requests[0].messages[-1].text == "[Image]\n[photo: could not be downloaded]"
