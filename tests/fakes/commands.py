"""What a database client sends: a pymongo command listener (``watched`` in
``tests.fakes.fixtures`` is a database on the test server whose client has one)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pymongo import monitoring

Doc = dict[str, Any]


class Commands(monitoring.CommandListener):
    """Every command a client sends: ``sent``, its name and how many items it carried
    (updates or documents); ``counts``, how many by name and collection ("insert inbox")."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []
        self.counts: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        items = event.command.get("updates") or event.command.get("documents") or []
        self.sent.append((event.command_name, len(items)))
        target = event.command.get(event.command_name)
        where = target if isinstance(target, str) else ""
        self.counts[f"{event.command_name} {where}".strip()] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def named(self, name: str) -> list[int]:
        return [n for command, n in self.sent if command == name]

    def clear(self) -> None:
        self.sent.clear()
        self.counts.clear()
