"""The rules a monitor's stored changes keep, over its collection
(``storage.repos.monitors``): settings checked before they are stored, the cap on
how many monitors there are, and a heartbeat's ping token."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from scheduler.monitors.monitor import MonitorLimits, settle
from storage.repos.monitor_record import KINDS, Monitor, MonitorError, MonitorSettings
from storage.repos.monitors import MonitorRepo


class MonitorStore:
    """Creates and changes monitors by the rules; everything else is ``repo``'s."""

    def __init__(self, repo: MonitorRepo, limits: MonitorLimits) -> None:
        self.repo = repo
        self.limits = limits

    async def create(self, kind: Any, given: Mapping[str, Any]) -> Monitor:
        if kind not in KINDS:
            got = "" if kind is None else f"; got {str(kind)[:40]!r}"
            raise MonitorError(f"kind is required: http or heartbeat, or change{got}")
        settings = settle(kind, given, None, self.limits)
        await self.repo.name_free(settings.name)
        token = secrets.token_urlsafe(24) if kind == "heartbeat" else None
        return await self.repo.create(kind, settings, token, self.limits.max_monitors)

    async def update(self, monitor_id: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.repo.find(monitor_id)
        kind = given.get("kind")
        if kind is not None and kind != monitor.kind:
            raise MonitorError(
                f"{monitor.name} is a {monitor.kind} monitor and its kind cannot change; "
                "delete it and create another"
            )
        settings = settle(monitor.kind, given, MonitorSettings.of(monitor), self.limits)
        if settings.name.casefold() != monitor.name.casefold():
            await self.repo.name_free(settings.name, monitor.id)
        watched = ("url", "selector", "keyword")
        return await self.repo.change_settings(
            monitor,
            settings,
            restart=monitor.kind != "heartbeat" and settings.url != monitor.url,
            rebase=monitor.kind == "change"
            and any(getattr(settings, k) != getattr(monitor, k) for k in watched),
        )
