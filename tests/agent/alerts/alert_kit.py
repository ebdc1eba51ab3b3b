"""Shared by the alert router tests: read an alert back from the database."""

from __future__ import annotations

from typing import Any

from agent.app.core import App


async def _alert(app: App, code: str) -> dict[str, Any]:
    doc = await app.database.db["alerts"].find_one({"code": code})
    assert doc is not None
    return doc
