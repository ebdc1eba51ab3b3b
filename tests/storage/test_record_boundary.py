"""Stored documents stay inside ``storage/``: code above the stores works with typed
records, never with the driver or a ``Doc`` (issue 37, "typed records").

``ABOVE_STORAGE`` lists the packages checked so far; widen it as each part moves its
database access under ``storage/repos/``. ``ALLOWED`` names the modules (paths from the
repository's root) that may still do so, each with its reason.
"""

from __future__ import annotations

import ast

from tests.source_tree import ROOT, modules

ABOVE_STORAGE: tuple[str, ...] = ("agent", "channels", "scheduler", "runtime")
"""Packages (folders from the root) whose modules must not touch stored documents."""
HANDLE = "holds the database handle only, to build its stores"
ALLOWED: dict[str, str] = {
    "agent/alerts/router.py": HANDLE,
    "agent/app/features/scheduling.py": HANDLE,
    "agent/cli/doctor.py": HANDLE + " and ping the server",
    "agent/context.py": HANDLE + " (the run context carries it to the tools)",
    "agent/owner.py": HANDLE + " (OwnerSettingsStore)",
    "agent/spend/budget.py": "claims the budget's once-a-day notices in usage itself",
    "agent/spend/prices.py": HANDLE + " (the price table's store)",
    "agent/spend/report.py": HANDLE + " (the usage counts' store)",
    "agent/tools/db.py": "the db_query sandbox: the model's own queries, documents as such",
    "agent/tools/memory.py": "names the built-in collections the schema notes must not redefine",
    "channels/delivery/intake.py": "inserts and re-reads inbox rows itself (on the message walk)",
    "channels/delivery/outbox.py": HANDLE + "; tells a duplicate key from other failures",
    "channels/delivery/pipeline.py": "claims and groups inbox rows itself (on the message walk)",
}
"""Modules under ``ABOVE_STORAGE`` let off, each with why; shrink it as each moves its
database access under ``storage/repos/``."""
DRIVER = ("pymongo", "bson", "motor")
"""The database driver's packages: only ``storage/`` speaks to the database."""
RECORD_ID = ("bson", "ObjectId")
"""``from bson import ObjectId``: the type of a record's id (``InboxRow.id``,
``Conversation.id``), which code above the stores holds and passes back to them."""
COLLECTIONS = "storage.collections"
"""The collections' names: a module that imports them addresses a collection itself."""
DOC = "Doc"
"""``storage.records.Doc``, a stored document as a plain dict."""


def _driver(module: str) -> bool:
    return module.split(".")[0] in DRIVER


def _collections(module: str, names: list[ast.alias]) -> bool:
    """Whether ``from module import names`` brings in the collections' names."""
    return module == COLLECTIONS or (
        module == "storage" and any(a.name == "collections" for a in names)
    )


def _crossings(where: str, source: str) -> list[str]:
    """Where the module ``where`` (its ``source``) imports the driver (a record id
    aside), the collections' names or ``Doc``, or defines its own ``Doc``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno} imports {a.name}" for a in node.names
                      if _driver(a.name) or a.name == COLLECTIONS]  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            ids = [(node.module, a.name) for a in node.names] == [RECORD_ID]
            if _driver(node.module) and not ids:
                found.append(f"{where}:{node.lineno} imports from {node.module}")
            if _collections(node.module, node.names):
                found.append(f"{where}:{node.lineno} imports the collections' names")
            found += [f"{where}:{node.lineno} imports {DOC} from {node.module}"
                      for a in node.names if a.name == DOC]  # fmt: skip
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == DOC for t in targets):
                found.append(f"{where}:{node.lineno} defines its own {DOC}")
    return found


def test_code_above_the_stores_never_touches_stored_documents() -> None:
    """The driver, the collections' names and ``Doc`` are storage's: a module above
    the stores that imports any of them builds queries or reads documents itself,
    instead of asking its repository (``storage/repos/``) for typed records."""
    crossings = [
        crossing
        for path in modules(ABOVE_STORAGE)
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
        "from storage import collections as c\n"
        "from storage.collections import INBOX\n"
        "import storage.collections\n"
        "from bson import ObjectId\n"
        "from bson import ObjectId, SON\n"
        "from bson.errors import InvalidId\n"
    )
    assert _crossings("m.py", source) == [
        "m.py:1 imports pymongo.errors",
        "m.py:2 imports from pymongo.asynchronous.database",
        f"m.py:3 imports {DOC} from storage.records",
        f"m.py:4 defines its own {DOC}",
        "m.py:6 imports the collections' names",
        "m.py:7 imports the collections' names",
        "m.py:8 imports storage.collections",
        "m.py:10 imports from bson",
        "m.py:11 imports from bson.errors",
    ]


def test_every_module_let_off_still_crosses() -> None:
    """An allowance outlives its reason only by mistake: once a module stops touching
    stored documents it leaves ``ALLOWED``, so the check covers it from then on."""
    stale = [
        where
        for where in ALLOWED
        if not (path := ROOT / where).is_file()
        or not any(where.startswith(f"{package}/") for package in ABOVE_STORAGE)
        or not _crossings(where, path.read_text(encoding="utf-8"))
    ]
    assert stale == []
