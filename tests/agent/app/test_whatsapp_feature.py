"""The WhatsApp feature: its tools and permissions, notices, linking, and alerts over
WhatsApp, with real neonize protobuf events through a fake client and a scripted agent."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from neonize.proto.Neonize_pb2 import Connected, Disconnected, LoggedOut

from agent.app.core import build_app
from agent.app.features.whatsapp import make_notifier
from agent.app.registry import REGISTRY, replaced, whatsapp_entry
from agent.cli.whatsapp_link import link
from channels.types import Channel
from storage.repos.whatsapp_permissions import WhatsAppPermissions
from tests.channels.whatsapp_kit import ALICE, BOB, OWNER, Kit, kit
from tests.conftest import make_settings
from tests.contexts import contact_ctx, owner_ctx
from tests.databases import AppDb
from tests.fakes.scripted import ScriptedModel
from tests.fakes.whatsapp import FakeClient
from tests.waiting import until

__all__ = ["kit"]  # a fixture, imported for pytest


# -- tools ------------------------------------------------------------------------------
async def test_permission_tools_round_trip(kit: Kit) -> None:
    ctx = owner_ctx(kit.app.deps)
    tools = kit.app.catalog.for_context(ctx)

    async def call(name: str, **args: Any) -> dict[str, Any]:
        return await tools.call(name, args, ctx)

    granted = await call(
        "whatsapp_manage_permission",
        action="grant",
        phone_number="+49 151 234-567",
        display_name="Alice",
    )
    assert granted["permission"] == {
        "phone_number": ALICE,
        "display_name": "Alice",
        "can_read": True,
        "can_reply": False,
    }
    updated = await call(
        "whatsapp_manage_permission", action="update", phone_number=ALICE, can_reply=True
    )
    assert updated["permission"]["can_reply"] is True
    listed = await call("whatsapp_list_permissions")
    assert [p["phone_number"] for p in listed["permissions"]] == [ALICE]
    revoked = await call("whatsapp_manage_permission", action="revoke", phone_number=ALICE)
    assert revoked["permission"]["can_read"] is False
    assert revoked["permission"]["can_reply"] is False
    removed = await call("whatsapp_manage_permission", action="remove", phone_number=ALICE)
    assert removed["removed"] is True
    assert (await call("whatsapp_list_permissions"))["permissions"] == []
    for bad in (
        {"action": "grant", "phone_number": "4915123"},
        {"action": "grant", "phone_number": "call me maybe"},
        {"action": "grant", "phone_number": ALICE, "can_read": "yes"},
        {"action": "grant", "phone_number": OWNER},
        {"action": "update", "phone_number": BOB, "can_read": True},
        {"action": "promote", "phone_number": BOB},
    ):
        assert "error" in await call("whatsapp_manage_permission", **bad), bad
    assert await WhatsAppPermissions(kit.app.deps.db).all() == []


async def test_send_and_read_tools_respect_permissions(kit: Kit) -> None:
    ctx = owner_ctx(kit.app.deps)
    tools = kit.app.catalog.for_context(ctx)
    refused = await tools.call("whatsapp_send_message", {"phone": BOB, "message": "hi"}, ctx)
    assert "can_reply" in refused["error"]
    await kit.grant(ALICE, can_reply=True)
    sent = await tools.call("whatsapp_send_message", {"phone": ALICE, "message": "hi"}, ctx)
    assert sent["queued"] is True
    await until(lambda: bool(kit.client.sent))
    assert kit.client.sent == [(f"{ALICE[1:]}@s.whatsapp.net", "hi")]
    await kit.say(ALICE, "thanks!")
    await kit.say(BOB, "secret from an unknown")
    await kit.settle()
    read = await tools.call("whatsapp_read_messages", {}, ctx)
    assert [m["text"] for m in read["messages"]] == [  # a contact's words: in their block
        f'<external_content from="a WhatsApp message from {ALICE}" trust="untrusted">\n'
        "thanks!\n</external_content>"
    ]
    assert "error" in await tools.call("whatsapp_read_messages", {"contact": BOB}, ctx)


async def test_tools_and_prompt_section_only_while_connected(kit: Kit) -> None:
    await kit.client.emit(Disconnected())
    ctx = owner_ctx(kit.app.deps)
    assert not [n for n in kit.app.catalog.for_context(ctx).names if n.startswith("whatsapp_")]
    await kit.client.emit(Connected())
    names = kit.app.catalog.for_context(ctx).names
    assert {
        "whatsapp_read_messages",
        "whatsapp_send_message",
        "whatsapp_manage_permission",
        "whatsapp_list_permissions",
    } <= set(names)
    contact = contact_ctx(kit.app.deps)
    assert not [n for n in kit.app.catalog.for_context(contact).names if n.startswith("whatsapp")]


# -- the feature ------------------------------------------------------------------------
async def test_notices_use_the_alert_router_when_present(kit: Kit) -> None:
    raised: list[dict[str, Any]] = []

    class Alerts:
        async def raise_alert(self, **fields: Any) -> dict[str, Any]:
            raised.append(fields)
            return fields

    app = kit.app
    alerts = Alerts()
    notify = make_notifier(app.outbox, app.deps.reach, app.deps.owner, alerts)  # type: ignore[arg-type]
    await notify("logged_out", "WhatsApp was logged out")
    assert raised[0]["severity"] == "warning"
    assert raised[0]["dedupe_key"] == "whatsapp:logged_out"
    assert raised[0]["source"] == "whatsapp"


async def test_feature_does_nothing_when_disabled(app_db: AppDb, tmp_path: Path) -> None:
    made: list[str] = []
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"wa_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
    )
    registry = replaced(REGISTRY, whatsapp_entry(lambda path: made.append(path)))
    model = ScriptedModel(lambda r: "ok")
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[], registry=registry
    ) as app:
        assert "whatsapp" not in app.channels
        await app.database.client.drop_database(settings.mongodb_db)
    assert made == []


async def test_terminal_chat_leaves_the_whatsapp_session_to_run(
    app_db: AppDb, tmp_path: Path
) -> None:
    clients: list[FakeClient] = []
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"wa_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        whatsapp_enabled=True,
        owner_phone=OWNER,
    )
    whatsapp = whatsapp_entry(lambda path: clients.append(FakeClient(path)) or clients[-1])
    async with build_app(
        settings, embedded=app_db.server, model=ScriptedModel(lambda r: "x"), channels=[],
        registry=replaced(REGISTRY, whatsapp), exclusive_transports=False,
    ) as app:  # fmt: skip
        assert "whatsapp" not in app.channels and clients == []
        await app.database.client.drop_database(settings.mongodb_db)


# -- linking ----------------------------------------------------------------------------
async def test_link_validates_the_phone_and_pairs(tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path)
    assert await link(settings, "12345") == 2
    printed: list[str] = []
    clients: list[FakeClient] = []

    def factory(path: str) -> FakeClient:
        clients.append(FakeClient(path))
        return clients[-1]

    async def drive() -> None:
        await until(lambda: bool(clients) and clients[0].session is not None)
        await clients[0].emit_qr(b"2@qr-data")
        await clients[0].emit(Connected())

    driver = asyncio.create_task(drive())
    code = await link(settings, "+49 151 234567", client_factory=factory, out=printed.append)
    await driver
    assert code == 0
    assert clients[0].paired == ["49151234567"]
    assert clients[0].path == str(tmp_path / "whatsapp.sqlite3")
    assert any("ABCD-EFGH" in p for p in printed)

    clients.clear()
    driver = asyncio.create_task(drive())
    assert await link(settings, None, client_factory=factory, out=printed.append) == 0
    await driver
    assert any(p.startswith("Scan this") and len(p.splitlines()) > 10 for p in printed)


# -- alerts over WhatsApp ---------------------------------------------------------------
@pytest.fixture
async def alert_kit(app_db: AppDb, tmp_path: Path) -> AsyncIterator[Kit]:
    """WhatsApp as the owner's only chat channel, with the real alert router."""
    async with whatsapp_alerts(app_db, tmp_path) as kit:
        yield kit


@contextlib.asynccontextmanager
async def whatsapp_alerts(
    app_db: AppDb, tmp_path: Path, channels: Sequence[Channel] = ()
) -> AsyncIterator[Kit]:
    """WhatsApp (and ``channels``) with the real alert router."""
    from agent.app.features.alerts import AlertingOptions, alerting

    clients: list[FakeClient] = []

    def factory(path: str) -> FakeClient:
        clients.append(FakeClient(path))
        return clients[-1]

    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"wa_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        whatsapp_enabled=True,
        owner_phone=OWNER,
    )
    features = [alerting(AlertingOptions(background=False))]
    whatsapp = whatsapp_entry(factory, burst_seconds=0.2, health_every=3600)
    model = ScriptedModel(lambda r: "agent answer")
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=list(channels), features=features,
        registry=replaced(REGISTRY, whatsapp),
    ) as app:  # fmt: skip
        assert app.deps.alerts is not None
        # No quiet hours: the default (22:00-07:00) would hold these info alerts at night.
        await app.deps.alerts.owner.update(quiet_hours=[])
        kit = Kit(app, clients[0], model)
        await kit.client.emit(Connected())
        try:
            yield kit
        finally:
            await app.database.client.drop_database(settings.mongodb_db)


async def test_an_alert_reaches_the_owner_on_whatsapp_and_ack_works(alert_kit: Kit) -> None:
    router = alert_kit.app.deps.alerts
    assert router is not None
    alert = await router.raise_alert(severity="info", title="Disk 91% full", body="on nas")
    await alert_kit.settle()
    [(to, text)] = alert_kit.client.sent
    assert to.startswith(OWNER.lstrip("+")) and f"#{alert.code}" in text
    assert "Disk 91% full" in text

    await alert_kit.say(OWNER, "ack")
    await alert_kit.settle()
    confirmation = alert_kit.client.sent[-1][1]
    assert f"#{alert.code} acknowledged" in confirmation
    assert alert_kit.model.requests == []  # a directive never costs a model call
    [stored] = await router.open_alerts()
    assert stored.status == "acknowledged"


async def test_whatsapp_logging_out_is_reported_on_another_channel(
    app_db: AppDb, tmp_path: Path
) -> None:
    import io

    from channels.console import ConsoleChannel

    def no_input() -> str:
        raise EOFError

    out = io.StringIO()
    console = ConsoleChannel(out=out, read_line=no_input)  # WhatsApp stays first in preference
    async with whatsapp_alerts(app_db, tmp_path, [console]) as alert_kit:
        await alert_kit.client.emit(LoggedOut())
        await until(lambda: "WhatsApp is logged out" in out.getvalue())
        assert not any("logged out" in text for _, text in alert_kit.client.sent)
