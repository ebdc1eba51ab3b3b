"""pytest-timeout with tests/timeout_tasks.py, on deliberately stuck tests in a pytest
subprocess running on uvloop, as the suite does: the run ends, and its report names the
test and shows where its coroutine waits, await by await."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

INNER_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
timeout = 1
timeout_method = thread
"""

INNER_CONFTEST = """\
import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.Loop}
"""

INNER_TESTS = """\
import asyncio

import pytest


async def stuck_in_an_await():
    await asyncio.Event().wait()


async def test_async_hang():
    await stuck_in_an_await()


@pytest.fixture
async def fixture_that_hangs():
    await stuck_in_an_await()
    yield


async def test_stuck_in_fixture_setup(fixture_that_hangs):
    pass


def test_never_reached():
    pass
"""


def _run(where: Path, test: str) -> tuple[int, str]:
    (where / "pytest.ini").write_text(INNER_INI)
    (where / "conftest.py").write_text(INNER_CONFTEST)
    (where / "test_stuck.py").write_text(INNER_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_TIMEOUT")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.timeout_tasks", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-q", f"test_stuck.py::{test}"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("test", "waits_in"),
    [("test_async_hang", "test_async_hang"), ("test_stuck_in_fixture_setup", "fixture_that_hangs")],
)
def test_a_stuck_async_test_ends_the_run_with_its_await_chain(
    tmp_path: Path, test: str, waits_in: str
) -> None:
    code, output = _run(tmp_path, test)
    assert code == 1, output
    assert f"Timeout: test_stuck.py::{test} ran longer than 1 s" in output
    assert "pending asyncio task" in output
    assert f"in {waits_in}" in output  # the coroutine the test or fixture runs ...
    assert "in stuck_in_an_await" in output  # ... and what it awaits, not only the outer one
    assert "Stack of MainThread" in output  # pytest-timeout's own report follows
