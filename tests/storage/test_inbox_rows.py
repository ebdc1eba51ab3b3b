"""Inbox rows read once into ``InboxRow`` (with their media as ``MediaEntry``s) and
written from it: what is written reads back the same, a row of an older shape loads,
and a damaged one is refused naming its field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from bson import ObjectId

from storage.records import BadRecord
from storage.repos.inbox import InboxRow, MediaEntry

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def _row(**fields: object) -> InboxRow:
    photo = MediaEntry(kind="image", mime="image/jpeg", size=1200, source={"file_id": "f"})
    voice = MediaEntry(
        kind="audio", status="stored", file_id=ObjectId(), duration_s=12, transcript="hi"
    )
    base = InboxRow(
        id=ObjectId(), channel="telegram", external_id="7", chat_id="42", sender_id="42",
        text="look", received_at=NOW, sender_name="Ann", meta={"is_group": False},
        conversation_key="telegram:42", status="processing", claimed_at=NOW,
        media=(photo, voice), burst_ids=(ObjectId(), ObjectId()),
    )  # fmt: skip
    return InboxRow.from_doc({**base.to_doc(), **fields, "burst_ids": list(base.burst_ids)})


def test_a_row_reads_back_as_it_was_written() -> None:
    row = _row()
    assert InboxRow.from_doc(row.to_doc() | {"burst_ids": list(row.burst_ids)}) == row
    photo, voice = row.media
    assert (photo.status, photo.size, photo.source) == ("pending", 1200, {"file_id": "f"})
    assert voice.file_id is not None and voice.transcript == "hi" and voice.duration_s == 12


def test_an_older_row_loads_with_defaults_and_a_file_id_kept_as_text() -> None:
    file_id = ObjectId()
    old = {"_id": ObjectId(), "channel": "sms", "external_id": "SM1", "received_at": NOW,
           "media": [{"kind": "image", "status": "stored", "file_id": str(file_id)}]}  # fmt: skip
    row = InboxRow.from_doc(old)
    assert (row.text, row.attempts, row.meta, row.burst_leader) == ("", 1, {}, None)
    assert row.media[0].file_id == file_id


@pytest.mark.parametrize(
    ("field", "value"),
    [("received_at", "yesterday"), ("meta", "x"), ("attempts", "two"), ("media", ["photo"])],
)
def test_a_damaged_row_is_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(BadRecord, match=field):
        _row(**{field: value})
