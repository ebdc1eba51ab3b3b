"""One wall clock: product code reads the time through ``runtime.clock`` (a ``Clock``
it is handed, or ``utcnow``), so a test that fixes the clock fixes every reading of it.
Monotonic time (timeouts, pacing) is not the wall clock and stays ``time.monotonic``."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_tree import ROOT, modules

THE_CLOCK = Path("runtime/clock.py")
WALL_CLOCKS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today")}
WALL_CLOCKS |= {("date", "today"), ("time", "time"), ("time", "time_ns")}
NOT_YET = {Path("scheduler/engine.py")}
"""Its APScheduler timer is armed in real time (``Timer.arm``): to be read through
``runtime.clock.utcnow`` by the engine's owner (issue 37, item 1)."""


def _wall_clock_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in WALL_CLOCKS
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_wall_clock_is_read_in_runtime_clock_alone() -> None:
    reads = [
        read
        for path in modules()
        if path.relative_to(ROOT) not in {THE_CLOCK, *NOT_YET}
        for read in _wall_clock_reads(path)
    ]
    assert reads == []
    assert len(_wall_clock_reads(ROOT / THE_CLOCK)) == 1
