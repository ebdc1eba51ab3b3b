"""Stored documents stay inside ``storage/``: code above the stores works with typed
records, never with the driver or a ``Doc`` (issue 37, "typed records").

``ABOVE_STORAGE`` lists the packages checked so far; widen it as each part moves its
database access under ``storage/repos/``. ``ALLOWED`` names the modules (paths from the
repository's root) that may still do so, each for a reason given beside it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABOVE_STORAGE: tuple[str, ...] = ("scheduler/pulse", "scheduler/monitors")
"""Packages (folders from the root) whose modules must not touch stored documents."""
ALLOWED: frozenset[str] = frozenset()
"""Modules under ``ABOVE_STORAGE`` let off, e.g. ``"scheduler/x.py"``."""
DRIVER = ("pymongo", "bson", "motor")
"""The database driver's packages: only ``storage/`` speaks to the database."""
DOC = "Doc"
"""``storage.records.Doc``, a stored document as a plain dict."""


def _modules() -> Iterator[Path]:
    for package in ABOVE_STORAGE:
        folder = ROOT / package
        assert folder.is_dir(), f"{package} is not a folder of the project"
        yield from sorted(folder.rglob("*.py"))


def _driver(module: str) -> bool:
    return module.split(".")[0] in DRIVER


def _crossings(where: str, source: str) -> list[str]:
    """Where the module ``where`` (its ``source``) imports the driver, imports ``Doc``
    or defines its own."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno} imports {a.name}" for a in node.names
                      if _driver(a.name)]  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _driver(node.module):
                found.append(f"{where}:{node.lineno} imports from {node.module}")
            found += [f"{where}:{node.lineno} imports {DOC} from {node.module}"
                      for a in node.names if a.name == DOC]  # fmt: skip
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == DOC for t in targets):
                found.append(f"{where}:{node.lineno} defines its own {DOC}")
    return found


def test_code_above_the_stores_never_touches_stored_documents() -> None:
    """The driver and ``Doc`` are storage's: a scheduler module that imports either
    builds queries or reads documents itself, instead of asking its repository
    (``storage/repos/``) for typed records."""
    crossings = [
        crossing
        for path in _modules()
        if (where := path.relative_to(ROOT).as_posix()) not in ALLOWED
        for crossing in _crossings(where, path.read_text(encoding="utf-8"))
    ]
    assert crossings == []


def test_the_check_sees_a_crossing() -> None:
    """The checker itself: each kind of crossing is found (a check that finds nothing
    on any input would pass on anything)."""
    source = (
        "import pymongo.errors\n"
        "from pymongo.asynchronous.database import AsyncDatabase\n"
        "from storage.records import Doc, moment\n"
        "Doc = dict\n"
        "from storage.repos.pulse import PulseRepo\n"
    )
    assert _crossings("m.py", source) == [
        "m.py:1 imports pymongo.errors",
        "m.py:2 imports from pymongo.asynchronous.database",
        f"m.py:3 imports {DOC} from storage.records",
        f"m.py:4 defines its own {DOC}",
    ]
