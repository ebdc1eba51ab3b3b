"""What a pulse and a chat are told: only tools they are offered, news that is news,
what is within reach and what the built-in collections are (``inbox`` is chat, not
email; the fields of ``runs``).

The prompt is read the way the model gets it: the request the scripted model received.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from agent.conversation.prompt import reach_section
from agent.tools.alerts import RAISE_ALERT
from agent.tools.base import Toolset
from agent.tools.cron import MANAGE_CRONJOB
from agent.tools.pulse import MANAGE_PULSE
from storage import collections as c
from storage.repos.runs.record import Run
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import Request, ScriptedModel
from tests.scheduling_kit import call_tool, parts_of, scheduled_app

NOW = datetime(2026, 3, 6, 17, 0, tzinfo=UTC)


pytestmark = pytest.mark.clock(NOW)


async def _pulse_request(app: App, model: ScriptedModel) -> Request:
    await parts_of(app).engine.run_pulse_now("manual")
    return model.requests[-1]


def _whole(request: Request) -> str:
    return request.system + "\n" + "\n".join(m.text + m.note for m in request.messages)


async def test_a_pulse_without_send_message_never_mentions_it(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    # The console alone: send_message is not offered (no telegram/whatsapp/sms), nor
    # raise_alert (no alert router).
    async with scheduled_app(app_db, tmp_path, model, clock, pulse=True) as app:
        request = await _pulse_request(app, model)
    assert "send_message" not in request.tool_names and "raise_alert" not in request.tool_names
    text = _whole(request)
    assert "send_message" not in text and "raise_alert" not in text
    assert "No tool in this run reaches the owner" in text
    # Every tool named anywhere in what the pulse reads is one it has.
    named = set(re.findall(r"\b(?:[a-z]+_){1,3}[a-z]+\b", text)) & _all_tool_names()
    assert named <= set(request.tool_names), named - set(request.tool_names)


async def test_a_pulse_with_send_message_names_it(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    telegram = RecordingChannel("telegram")
    async with scheduled_app(
        app_db, tmp_path, model, clock, pulse=True, channels=[telegram],
        owner_telegram_ids=[99],
    ) as app:  # fmt: skip
        request = await _pulse_request(app, model)
    assert "send_message" in request.tool_names
    assert "Reach the owner only with send_message" in request.messages[-1].text
    assert "Your final text is only logged." in request.messages[-1].text
    assert "Reach the owner with send_message" in request.system
    assert "whether your final text is sent to the owner or only logged" in request.system
    assert "raise_alert" not in _whole(request)


async def test_a_check_in_pulse_says_its_answer_is_sent_and_names_only_its_tools(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, pulse=True) as app:
        await parts_of(app).pulse.update_config(enabled=True, check_ins=True)
        request = await _pulse_request(app, model)
    brief = request.messages[-1].text
    assert "The owner asked for these check-ins: your final answer is sent to them" in brief
    assert "never send it again yourself" in brief  # one check-in, not two
    assert "only logged" not in brief
    named = set(re.findall(r"\b(?:[a-z]+_){1,3}[a-z]+\b", _whole(request))) & _all_tool_names()
    assert named <= set(request.tool_names), named - set(request.tool_names)


def _all_tool_names() -> set[str]:
    return {
        "save_memory", "update_db_schema", "db_query", "manage_cronjob", "manage_pulse",
        "manage_settings", "raise_alert", "manage_alerts", "web_search", "send_message",
        "whatsapp_read_messages", "whatsapp_send_message", "whatsapp_manage_permission",
        "whatsapp_list_permissions",
    }  # fmt: skip


async def test_messages_since_counts_contacts_words_only(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """Counted: what a contact wrote. Not counted: the owner's own chat with the agent
    (answered as it came), slash commands (even after spaces), a stranger's message, a
    button press on one of our messages, a message that could not be stored, and
    anything from before the last pulse."""
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, pulse=True) as app:
        at = NOW - timedelta(minutes=1)
        rows: list[dict[str, Any]] = [
            _row("console", "owner", "remind me about the invoice", at),
            _row("whatsapp", "+49151234567", "are we still on for Friday?", at),
            _row("console", "owner", "/jobs", at),
            _row("telegram", "99", "  /pulse run", at),
            _row("telegram", "555", "", at, stranger=True),
            _row("telegram", "99", "#1 ack", at, meta={"kind": "button"}),
            _row("sms", "+15550100", "", at, status="failed"),
            _row("console", "owner", "old news", NOW - timedelta(days=3)),
        ]
        await app.deps.db[c.INBOX].insert_many(rows)
        request = await _pulse_request(app, model)
    brief = request.messages[-1].text
    assert "- 1 new message(s) from contacts" in brief, brief


def _row(channel: str, sender: str, text: str, at: datetime, **extra: Any) -> dict[str, Any]:
    """An inbox row as the pipeline stores it."""
    return {
        "channel": channel,
        "external_id": f"{channel}-{sender}-{text}-{at.timestamp()}",
        "chat_id": sender,
        "sender_id": sender,
        "sender_name": "",
        "text": text,
        "reply_to": None,
        "meta": {},
        "received_at": at,
        "conversation_key": f"{channel}:{sender}",
        "status": "done",
    } | extra


async def test_the_prompt_says_inbox_is_chat_not_email_and_keeps_built_in_docs(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        reply = await call_tool(
            app,
            "update_db_schema",
            schema="- ai_books: title, author, read_at (date)\n- master: add favourite_color",
        )
        assert reply["success"] is True and "master is built in" in reply["note"]
        await app.agent.respond("hi", owner_ctx(app.deps))
    system = model.requests[-1].system
    assert "inbox (chat messages Watchkeeper received on Telegram/WhatsApp/SMS; not email)" in (
        system
    )
    assert "- master: one document, the owner's profile" in system  # built in, still shown
    assert "- contacts: name, phone, email, notes" in system
    assert "- schedule: title, start, end" in system
    assert "- ai_books: title, author, read_at (date)" in system  # the model's own, kept
    assert system.index("- schedule: title") < system.index("- ai_books")


async def test_a_schema_stored_before_keeps_built_in_docs_once(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    from storage.repos.conversations import LEGACY_DB_SCHEMA

    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        await app.deps.instructions.set_db_schema(LEGACY_DB_SCHEMA)
        await app.agent.respond("hi", owner_ctx(app.deps))
    system = model.requests[-1].system
    assert system.count("- master: one document") == 1
    assert "### Your collections\n(none documented yet)" in system


def test_update_db_schema_says_what_it_documents() -> None:
    from agent.tools.memory import UPDATE_DB_SCHEMA

    text = UPDATE_DB_SCHEMA.description
    assert "ai_*" in text and "always documented" in text


async def test_the_brief_counts_pulses_left_and_says_where_since_starts(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """24 a day round the clock: the 21:00 pulse has 22:00 and 23:00 after it. The first
    pulse ever says no pulse ran before; after an idle check, "since" names the check,
    not a pulse that never ran; after a pulse, the pulse."""
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, pulse=True) as app:
        parts = parts_of(app)
        await parts.pulse.owner.update(quiet_hours=[])
        await parts.pulse.update_config(pulses_per_day=24)
        news = app.deps.db[c.INBOX]

        async def pulse_at(hour: int, contact_wrote: bool) -> tuple[Run, str]:
            clock.set(NOW.replace(hour=hour))
            if contact_wrote:
                row = _row("whatsapp", "+4915100000099", f"news at {hour}", clock() - _MINUTE)
                await news.insert_one(row)
            asked = len(model.requests)
            run = await parts.engine.recorder.pulse(clock())
            brief = model.requests[-1].messages[-1].text if len(model.requests) > asked else ""
            return run, brief

        run, brief = await pulse_at(21, contact_wrote=True)
        assert run.status == "success"
        assert "Pulses left today after this one: 2." in brief, brief
        assert "## Since 20:00 (no pulse has run before)" in brief, brief
        run, brief = await pulse_at(22, contact_wrote=False)
        assert run.reason == "idle" and brief == ""
        run, brief = await pulse_at(23, contact_wrote=True)
        assert "Pulses left today after this one: 0." in brief, brief
        assert "## Since the last check (22:00; nothing was new then)" in brief, brief
        clock.set(NOW.replace(hour=23, minute=30))
        await parts.engine.run_pulse_now("manual")
        assert "## Since the last pulse (23:00)" in model.requests[-1].messages[-1].text


_MINUTE = timedelta(minutes=1)


async def test_the_two_probes_read_what_is_within_reach(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """Issue 32's probes as they happened: "check my inbox twelve times a day" and "if the
    backup check fails, text me". The request says there is no mail without a tool (and
    where mail would come from), what on_failure counts, and what the runs hold."""
    model = ScriptedModel(lambda r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        await app.agent.respond("check my inbox twelve times a day", owner_ctx(app.deps))
        await app.agent.respond("if the backup check fails, text me", owner_ctx(app.deps))
    inbox, backup = model.requests
    assert not any("mail" in name for name in inbox.tool_names)
    assert "no web, mail or remote access without one" in inbox.system
    assert "mail comes from an MCP server the owner adds" in inbox.system
    assert "inbox (chat messages Watchkeeper received on Telegram/WhatsApp/SMS; not email)" in (
        inbox.system
    )
    assert "on_failure covers runs that error or time out, not bad results" in backup.system
    assert "- runs (read-only; cron and pulse runs): kind, job_id, name, status" in backup.system
    assert backup.system == inbox.system  # what stays, stays: the clock is in the note
    assert "Now: Friday 06 March 2026, 17:00 (UTC)" in backup.messages[-1].note


def test_what_is_within_reach_names_only_offered_tools() -> None:
    monitor = dataclasses.replace(MANAGE_PULSE, name="manage_monitor")  # a stand-in
    bare = reach_section(Toolset([MANAGE_CRONJOB]))
    assert "raise_alert" not in bare and "manage_monitor" not in bare
    assert "the instruction itself says to say so in its answer" in bare
    full = reach_section(Toolset([MANAGE_CRONJOB, RAISE_ALERT, monitor]))
    assert "POST /api/alerts; or use manage_monitor." in full
    assert (
        "the instruction itself says to raise_alert (after outside text it still goes out, "
        "at warning unless the instruction names critical or urgent)." in full
    )
    assert "on_failure" not in reach_section(Toolset([RAISE_ALERT]))
