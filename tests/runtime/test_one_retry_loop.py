"""One retry loop helper (issue 37, item 6): a loop that waits after a failure waits
through ``runtime.backoff.Pauses``, which counts the failures in a row and asks the
loop's ``Backoff`` for the wait (or waits longer when the service asked for longer).
A sleep of its own in an ``except`` would retry beside the policy: never backing off,
never counted in status."""

from __future__ import annotations

import ast

from tests.source_tree import ROOT, modules

WAITS = {"sleep", "wait_event", "wait_for", "wait"}


def _pauses(tree: ast.Module) -> set[str]:
    """What the module binds to a ``Pauses``: ``pauses``, ``self._pauses``..."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).split(".")[-1] == "Pauses"
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {ast.unparse(t) for t in targets}
    return bound


def _waits_beside_the_helper(source: str, where: str) -> list[str]:
    """Waits in an ``except`` inside a loop that are not a ``Pauses``' own."""
    tree = ast.parse(source, where)
    pauses = _pauses(tree)
    found = []
    for loop in ast.walk(tree):
        if not isinstance(loop, ast.While | ast.For | ast.AsyncFor):
            continue
        for handler in ast.walk(loop):
            if not isinstance(handler, ast.ExceptHandler):
                continue
            for call in ast.walk(handler):
                if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                    continue
                waits = call.func.attr.lstrip("_") in WAITS
                if waits and ast.unparse(call.func.value) not in pauses:
                    found.append(f"{where}:{call.lineno} {ast.unparse(call)}")
    return found


def test_a_loop_waits_after_a_failure_only_through_pauses() -> None:
    found = [
        wait
        for path in modules()
        for wait in _waits_beside_the_helper(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == []


def test_the_scan_sees_a_hand_written_retry() -> None:
    """The shape the poll loop had before: a 429's ``retry_after`` slept on its own."""
    source = (
        "async def poll(self):\n"
        "    pauses = Pauses(self._backoff)\n"
        "    while True:\n"
        "        try:\n"
        "            await self._bot.get_updates()\n"
        "        except RetryAfter as exc:\n"
        "            await asyncio.sleep(exc.retry_after)\n"
        "        except Exception:\n"
        "            await pauses.sleep()\n"
    )
    assert _waits_beside_the_helper(source, "poll") == ["poll:7 asyncio.sleep(exc.retry_after)"]
