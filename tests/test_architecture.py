"""The layout the README describes, checked: no import cycles, small modules, few
modules at ``agent/``'s top level. (Layer order is import-linter's, in pyproject.)"""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "channels", "scheduler", "storage")
MAX_LINES = 400


def test_no_module_imports_itself_through_others() -> None:
    """Imports inside functions count too: grimp reads every import statement."""
    graph = grimp.build_graph(*PACKAGES)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for package in (*PACKAGES, "tests", "bench")
        for path in (ROOT / package).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_agent_keeps_at_most_eight_modules_at_its_top_level() -> None:
    modules = sorted(p.name for p in (ROOT / "agent").glob("*.py"))
    assert len(modules) <= 8, modules
    concerns = {"conversation", "runs", "alerts", "tools", "llm", "app", "cli"}
    assert concerns <= {p.name for p in (ROOT / "agent").iterdir() if p.is_dir()}
