"""The owner's ``/status``: one short message built from the same sections as
``GET /api/status``, so the two never disagree, among them today's tokens against the
daily budget with what they cost (``agent.spend.budget``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from agent.app.application import StatusSection
from agent.app.features.mcp import mcp_status_line
from agent.context import AgentDeps, RunContext
from agent.conversation.dispatch import Command
from agent.spend.budget import RAISE_HINT
from agent.spend.prices import Cost, load_prices, shown
from agent.spend.report import priced
from channels.delivery.outbox import Outbox
from channels.registry import ChannelName
from channels.types import Channel, InboundMessage, Reply
from scheduler.views import quiet_text
from storage.repos.pairing import who


class StatusSource(Protocol):
    """What the status is read from: the ``App``, or the parts it is built from."""

    @property
    def channels(self) -> Mapping[str, Channel]: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def status_sections(self) -> Sequence[StatusSection]: ...


@dataclass(frozen=True)
class StatusBoard:
    """The parts the status is read from, before the ``App`` that holds them exists."""

    channels: Mapping[str, Channel]
    outbox: Outbox
    status_sections: Sequence[StatusSection]


async def status_data(source: StatusSource) -> dict[str, Any]:
    body: dict[str, Any] = {
        "channels": {name: ch.status() for name, ch in source.channels.items()},
        "outbox": {
            "pending": await source.outbox.pending_count(),
            "failed": len(await source.outbox.failed()),
        },
    }
    for section in source.status_sections:
        body.update(await section())
    return body


def spoken_time(iso: str, tz: ZoneInfo, now: datetime) -> str:
    """An ISO time from the status data as the owner reads it, in their zone: ``today
    14:02``, ``tomorrow 07:00``, ``Mon 30 Nov 07:00``."""
    local = datetime.fromisoformat(iso).astimezone(tz)
    days = (local.date() - now.astimezone(tz).date()).days
    clock = f"{local:%H:%M}"
    if -1 <= days <= 1:
        return f"{('yesterday', 'today', 'tomorrow')[days + 1]} {clock}"
    return f"{local:%a} {local.day} {local:%b} {clock}"


def status_text(data: dict[str, Any], model: str, *, tz: ZoneInfo, now: datetime) -> str:
    """``/status`` in words; times in the owner's zone ``tz``, said from ``now``."""
    lines = [f"Model: {model}"]
    channels = data.get("channels") or {}
    if channels:
        shown = []
        for name, status in sorted(channels.items()):
            state = status.get("state") or ("up" if status.get("connected", True) else "down")
            if status.get("last_error") and state == "up":  # its last send (a page) failed
                state = f"failing ({status['last_error']})"
            shown.append(f"{name} {state}")
        lines.append("Channels: " + ", ".join(shown))
    pulse = data.get("pulse")
    if pulse is not None:
        if pulse.get("enabled"):
            upcoming = pulse.get("next_pulse_at")
            lines.append(
                f"Pulse: {pulse['pulses_per_day']}/day, {pulse.get('done_today', 0)} done today, "
                f"next {spoken_time(upcoming, tz, now) if upcoming else 'not today'}"
            )
        else:
            lines.append("Pulse: off")
    if "cron_job_count" in data:
        lines.append(f"Cron jobs: {data['cron_job_count']}")
    alerts = data.get("alerts")
    if alerts is not None:
        real = [a for a in alerts if not a.get("test")]
        codes = " ".join(f"#{a.get('code')}" for a in real[:5])
        tests = "".join(f"; test page #{a.get('code')} running" for a in alerts if a.get("test"))
        lines.append(f"Open alerts: {len(real)}" + (f" ({codes})" if codes else "") + tests)
    calls = data.get("calls")
    if calls is not None:
        on = f"on, after {calls.get('after_minutes'):g} min" if calls.get("on") else ""
        lines.append(f"Calls: {on or 'off (' + str(calls.get('off_because')) + ')'}")
    owners = (data.get("owners") or {}).get(ChannelName.TELEGRAM)
    if owners:
        shown = [
            f"{who(o['id'], o.get('name') or '', o.get('handle') or '')}, paired"
            if o.get("source") == "paired"
            else f"Telegram {o['id']}"
            for o in owners
        ]
        lines.append("Telegram owners: " + "; ".join(shown))
    if mcp := mcp_status_line(data):
        lines.append(mcp)
    outbox = data["outbox"]
    if outbox["pending"] or outbox["failed"]:
        lines.append(f"Outbox: {outbox['pending']} pending, {outbox['failed']} failed to send")
    if "budget" in data:
        lines.append(budget_line(data["budget"]))
    if "zone" in data:
        lines.append(zone_line(data["zone"]))
    return "\n".join(lines)


def zone_section(deps: AgentDeps) -> StatusSection:
    """``zone``: the owner's timezone, and whether anyone chose it (``TIMEZONE`` or
    ``manage_settings``); until then quiet hours and jobs run on UTC."""

    async def section() -> dict[str, Any]:
        prefs = await deps.owner.load()
        chosen = deps.settings.timezone_chosen or prefs.zone_stored
        quiet = quiet_text(prefs.quiet_hours)
        return {"zone": {"timezone": prefs.timezone, "chosen": chosen, "quiet_hours": quiet}}

    return section


def zone_line(zone: Mapping[str, Any]) -> str:
    if zone["chosen"]:
        return f"Timezone: {zone['timezone']}"
    return (
        f"Timezone: {zone['timezone']}, never chosen: quiet hours ({zone['quiet_hours']}) "
        "are UTC; tell me where you are to change it"
    )


def budget_section(deps: AgentDeps) -> StatusSection:
    """``budget``: today's tokens against ``DAILY_TOKEN_BUDGET`` (``limit`` 0: no cap),
    when it resets, and what they cost in USD (``estimated``: models not priced)."""

    async def section() -> dict[str, Any]:
        view = await deps.budget.view()
        counts = [c for c in await deps.usage.since(view.day) if c.day == view.day]
        cost, estimated = priced(counts, await load_prices(deps.db))
        return {
            "budget": {
                "day": view.day.isoformat(),
                "used": view.used,
                "limit": view.limit,
                "spent": view.spent,
                "resets_at": view.resets_at.isoformat(),
                "timezone": deps.owner.tz.key,
                "usd": round(cost.usd, 6),
                "estimated": list(estimated),
            }
        }

    return section


def budget_line(budget: Mapping[str, Any]) -> str:
    """Today's tokens, the daily budget, when it resets, and their cost in USD."""
    unknown = budget["estimated"]
    money = shown(Cost(budget["usd"], bool(unknown)))
    money += f" (estimated: {', '.join(unknown)} not priced)" if unknown else ""
    used, limit = budget["used"], budget["limit"]
    if limit <= 0:
        return f"Tokens today: {used:,} (no daily cap), {money}"
    resets = datetime.fromisoformat(budget["resets_at"])
    line = (
        f"Tokens today: {used:,} of {limit:,} ({used / limit:.0%}), {money}; "
        f"resets {resets:%H:%M} {budget['timezone']}"
    )
    if budget["spent"]:
        line += f"\nBudget spent: chats answer without the model, runs are skipped; {RAISE_HINT}"
    return line


def status_command(source: StatusSource, model: str) -> Command:
    """``/status``, read from ``source`` (``model``: the model's name)."""

    async def command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        data = await status_data(source)
        return [Reply(status_text(data, model, tz=ctx.tz, now=ctx.now))]

    return command
