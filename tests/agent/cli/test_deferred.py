"""Deferred package ``__init__``: what the OpenAI SDK's type indexes cost nothing until
asked for, and behave as normally imported packages once they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.deferred import DeferredPackage, defer_package_inits

ROOT = Path(__file__).resolve().parents[3]
INIT = """\
import time
from . import log
log.RUNS.append("{name}")
time.sleep({sleep})
from .sub import VALUE
from . import other
TOTAL = VALUE + other.EXTRA
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    """A package ``pkg_<n>`` whose __init__ records each run and imports submodules."""
    name = f"pkg_{time.monotonic_ns()}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(INIT.format(name=name, sleep=0.2))
    (root / "log.py").write_text("RUNS: list[str] = []\n")
    (root / "sub.py").write_text("VALUE = 40\n")
    (root / "other.py").write_text("EXTRA = 2\n")
    nested = root / "nested"
    nested.mkdir()
    (nested / "__init__.py").write_text("raise AssertionError('nested __init__ ran')\n")
    (nested / "leaf.py").write_text("LEAF = 'leaf'\n")
    finders = list(sys.meta_path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.meta_path[:] = finders
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]


def runs(name: str) -> list[str]:
    log = sys.modules.get(f"{name}.log")  # imported by the package's __init__ alone
    return [] if log is None else list(log.RUNS)


def test_submodules_import_without_the_package_init(package: str) -> None:
    defer_package_inits([package])
    sub = __import__(f"{package}.sub", fromlist=["VALUE"])
    assert sub.VALUE == 40
    assert isinstance(sys.modules[package], DeferredPackage)
    assert runs(package) == []


def test_the_first_missing_name_runs_init_once_and_then_it_is_a_package(package: str) -> None:
    defer_package_inits([package])
    module = __import__(package)
    assert module.TOTAL == 42
    assert module.sub.VALUE == 40
    assert runs(package) == [package]
    with pytest.raises(AttributeError, match="no attribute 'absent'"):
        _ = module.absent
    assert runs(package) == [package]  # not run again by a missing name


def test_threads_asking_at_once_share_one_run(package: str) -> None:
    defer_package_inits([package])
    module = __import__(package)
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(module.TOTAL)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [42] * 4
    assert runs(package) == [package]


def test_a_deferred_subpackage_needs_its_parent_imported_first(package: str) -> None:
    """Parents import in their own order: here the parent's __init__ is deferred too,
    and the nested package's (which would fail) never runs for its leaf."""
    defer_package_inits([package, f"{package}.nested"])
    leaf = __import__(f"{package}.nested.leaf", fromlist=["LEAF"])
    assert leaf.LEAF == "leaf"
    assert runs(package) == []


def test_the_package_own_getattr_hook_answers_after_init(tmp_path: Path, package: str) -> None:
    init = tmp_path / package / "__init__.py"
    init.write_text(init.read_text() + "def __getattr__(name):\n    return name.upper()\n")
    defer_package_inits([package])
    module = __import__(package)
    assert module.lazy_name == "LAZY_NAME"
    assert module.TOTAL == 42


def test_packages_not_named_and_absent_ones_are_untouched(package: str) -> None:
    finders = len(sys.meta_path)
    defer_package_inits([package, "no_such_package_here"])
    defer_package_inits([package, "no_such_package_here"])  # a second call adds nothing
    assert len(sys.meta_path) == finders + 1
    import json as stdlib_json

    assert not isinstance(stdlib_json, DeferredPackage)
    with pytest.raises(ModuleNotFoundError):
        __import__("no_such_package_here")


OPENAI = """
import json, sys
from agent.cli.deferred import OPENAI_TYPES, defer_package_inits
defer_package_inits(OPENAI_TYPES)
from agent.llm.openai_client import make_client
client = make_client("sk-test", "http://127.0.0.1:9", timeout=5.0, max_retries=0)
before = sum(m.startswith("openai") for m in sys.modules)
import openai
assert openai.types.Completion.__name__ == "Completion"
from openai.types.responses import Response
after = sum(m.startswith("openai") for m in sys.modules)
print(json.dumps([before, after]))
"""


def test_the_openai_sdk_imports_without_the_type_index_of_every_api() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    done = subprocess.run(
        [sys.executable, "-c", OPENAI],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    # Eager, ``import openai`` is ~520 modules; the client needs ~140 of them. Asked for
    # by name, the rest are still there.
    assert before < 200
    assert after > 400
