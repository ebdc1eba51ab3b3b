"""Issue 40, item 5: "fixed, it was the disk" resolves the alert and keeps the owner's
words as its note, without the model, under the rules of the bare word; a note that
asks something, or "done, thanks" long after any alert, still reaches the model.

Offline: the alert app (fake Twilio, a recording Telegram chat, a manual clock); the
model is scripted and must not be asked when the grammar applies the reply.
"""

from __future__ import annotations

import pytest

from agent.alerts.directives import NOTE_CHARS, Ack, ParsedReply, Resolve, parse_reply
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, Harness, alert_app

AUTH = {"Authorization": f"Bearer {ADMIN}"}
DISK = "it was the disk"


# -- the grammar -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fixed, it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("done: it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("done; it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("done - it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("Done \u2014 it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("fixed\u2013it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        ("fixed it was the disk", ParsedReply(directive=Resolve(DISK), everyday=True)),
        (
            "Fixed because The Disk was full",
            ParsedReply(directive=Resolve("because The Disk was full"), everyday=True),
        ),
        (
            "FIXED,   It Was  The Disk ",
            ParsedReply(directive=Resolve("It Was The Disk"), everyday=True),
        ),
        ("resolved, it was the disk", ParsedReply(directive=Resolve(DISK))),
        ("close: it was the disk", ParsedReply(directive=Resolve(DISK))),
        ("#3 fixed, it was the disk", ParsedReply(code="3", directive=Resolve(DISK))),
        ("fixed #3, it was the disk", ParsedReply(code="3", directive=Resolve(DISK))),
        ("#3: fixed, it was the disk", ParsedReply(code="3", directive=Resolve(DISK))),
        ("3c - it was the disk", ParsedReply(code="3", directive=Resolve(DISK))),
        ("ack: rebooting it", ParsedReply(directive=Ack("rebooting it"))),
        ("#3 acknowledged; rebooting it", ParsedReply(code="3", directive=Ack("rebooting it"))),
        ("on it, rebooting it", ParsedReply(directive=Ack("rebooting it"), short=True)),
        ("done, thanks", ParsedReply(directive=Resolve(), everyday=True)),  # no note
    ],
)
def test_a_resolve_or_ack_word_keeps_the_words_after_it(text: str, expected: ParsedReply) -> None:
    assert parse_reply(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "ok, but why did the backup fail?",
        "ok, rebooting it",  # "ok" is conversation before a comma
        "thanks, see you tomorrow",
        "k, later",
        "fixed, why did it fail?",
        "done, and add a check for the disk",
        "done, please check the backups",
        "done, now make the check hourly",  # a new request: the agent's, not a note
        "fixed - remind me to replace the disk on Monday",
        "the backup is fixed, it was the disk",
        "e-mail fixed, it was the disk",
        "#3 #4 fixed, it was the disk",
    ],
)
def test_words_that_ask_or_do_not_start_with_the_directive_are_free_text(text: str) -> None:
    parsed = parse_reply(text)
    assert parsed.directive is None and parsed.error is None


def test_a_note_naming_another_alert_goes_to_the_model_with_that_alert() -> None:
    assert parse_reply("fixed, it was #4") == ParsedReply(code="4")


def test_an_overlong_note_is_an_error_and_changes_nothing() -> None:
    longest = "fixed, " + "x" * NOTE_CHARS
    assert parse_reply(longest) == ParsedReply(directive=Resolve("x" * NOTE_CHARS), everyday=True)
    parsed = parse_reply("#3 fixed, " + "x" * (NOTE_CHARS + 1))
    assert parsed.directive is None and parsed.code == "3"
    assert parsed.error == (
        "A note on an alert keeps at most 500 characters; yours has 501. "
        "Nothing changed: send it shorter."
    )


@pytest.mark.parametrize(
    "text",
    [
        "fixed, " + "word " * 200_000,
        "fixed" + ", " * 500_000,
        "fixed" + " -" * 500_000,
        "," * 1_000_000,
        "fixed because " * 100_000,
        "#3 fixed, " + "#" * 1_000_000,
    ],
)
def test_pathological_replies_are_read_in_one_pass(text: str) -> None:
    """Only the head is searched for the directive; the rest is read once (no regex
    that backtracks): a megabyte parses as an error or free text, never hangs."""
    parsed = parse_reply(text)
    assert parsed.directive is None or parsed.directive == Resolve()


# -- end to end ------------------------------------------------------------------------------
async def alert_message_id(h: Harness, code: str) -> str:
    doc = await h.app.database.db["outbox"].find_one(
        {"idempotency_key": f"alert:{code}:0:telegram"}
    )
    assert doc is not None
    return str(doc["external_ids"][0])


async def say(h: Harness, text: str, reply_to: str | None = None) -> str:
    await h.chat.say(text, reply_to=reply_to)
    await h.settle()
    return h.chat.texts()[-1]


async def test_fixed_with_a_reason_as_a_reply_resolves_it_with_the_note(app_db: AppDb) -> None:
    """A Telegram reply to #3, hours later and after other alerts: resolved with the
    owner's words, no model request; the alert, its history and the page keep them."""
    async with alert_app(app_db) as h:
        for title in ("Certificate expires", "Backup late", "NAS disk 91% full"):
            await h.router.raise_alert(severity="info", title=title)
        message = await alert_message_id(h, "3")
        h.clock.advance(hours=3)
        await h.router.raise_alert(severity="info", title="Newer")
        reply = await say(h, "Fixed, it was the disk", reply_to=message)
        assert reply == "#3 resolved \u2014 note: it was the disk"
        assert h.model.requests == []
        doc = await _alert(h.app, "3")
        assert doc["status"] == "resolved" and doc["note"] == DISK
        assert doc["history"][-1]["action"] == "resolved"
        assert doc["history"][-1]["detail"] == DISK
        assert (await _alert(h.app, "4"))["status"] == "open"
        page = await h.client.get("/alerts?all=1", headers=AUTH)
        assert f"Note: {DISK}" in await page.text()


async def test_a_code_or_the_window_applies_a_note_and_an_ack_keeps_one(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backups failing")
        await h.router.raise_alert(severity="warning", title="NAS disk 91% full")
        message = await alert_message_id(h, "2")
        assert await say(h, "on it: rebooting the NAS", reply_to=message) == (
            "#2 acknowledged, escalation stopped \u2014 note: rebooting the NAS"
        )
        assert (await _alert(h.app, "2"))["note"] == "rebooting the NAS"
        h.clock.advance(hours=30)
        assert await say(h, "#1 fixed \u2014 swapped the cable") == (
            "#1 resolved \u2014 note: swapped the cable"
        )
        assert await say(h, "#1 done, it was the disk") == (
            "#1 was already resolved. The note was not kept."
        )
        assert (await _alert(h.app, "1"))["note"] == "swapped the cable"
        assert h.model.requests == []


async def test_done_thanks_long_after_any_alert_reaches_the_model(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backups failing")
        h.clock.advance(hours=25)
        assert await say(h, "done, thanks") == "agent answer"
        users = [m for m in h.model.requests[-1].messages if m.role == "user"]
        assert users[-1].text.startswith("done, thanks")
        assert (await _alert(h.app, "1"))["status"] == "open"
        # Soon after an alert, the same words close it (the thanks is no note).
        await h.router.raise_alert(severity="warning", title="NAS disk 91% full")
        assert await say(h, "done, thanks") == "#2 resolved."
        assert (await _alert(h.app, "2")).get("note") is None
        assert len(h.model.requests) == 1


async def test_an_overlong_note_is_refused_and_the_alert_stays_open(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="warning", title="Backups failing")
        reply = await say(h, "#1 fixed, " + "the disk " * 60)
        assert reply.startswith("A note on an alert keeps at most 500 characters")
        assert (await _alert(h.app, "1"))["status"] == "open"
        assert h.model.requests == []
