"""The test rig's own rules (issue 37, item 6): one ``clock`` fixture for every test,
and pytest-timeout used through its public names only, so that an upgrade of it needs
no reading of its internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import pytest_timeout  # type: ignore[import-untyped]

TESTS = Path(__file__).resolve().parent


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(TESTS.rglob("*.py"))]


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in ("pytest.fixture", "fixture")


def test_one_clock_fixture_serves_every_test() -> None:
    """``tests/conftest.py``'s ``clock``, started where ``@pytest.mark.clock`` says: a
    module wanting a fixed time marks itself instead of defining a clock of its own."""
    clocks = [
        f"{path.relative_to(TESTS)} {node.name}"  # not its line: conftest.py grows
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_is_fixture(d) for d in node.decorator_list)
        and ("clock" in node.name or "Clock" in ast.unparse(node.returns or ast.Constant(None)))
    ]
    assert clocks == ["conftest.py clock"]


def test_pytest_timeout_is_used_through_its_public_names(pytestconfig: pytest.Config) -> None:
    """Names of its ``__all__``, and hooks it declares (``pytest_timeout_*``)."""
    public = {*pytest_timeout.__all__, "__all__"}
    used: list[str] = []
    hooks: list[str] = []
    for path, tree in _trees():
        where = path.relative_to(TESTS)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "pytest_timeout":
                used += [f"{where}:{node.lineno} {a.name}" for a in node.names]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "pytest_timeout"
            ):
                used.append(f"{where}:{node.lineno} {node.attr}")
            elif isinstance(node, ast.FunctionDef) and node.name.startswith("pytest_timeout_"):
                hooks.append(node.name)
    assert [u for u in used if u.rsplit(" ", 1)[1] not in public] == []
    assert used  # the scan sees tests/timeout_tasks.py's use
    assert hooks and all(hasattr(pytestconfig.hook, h) for h in hooks)
