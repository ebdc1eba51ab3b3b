"""The per-test timeout (tests/timeouts.py) on deliberately stuck tests, in a pytest subprocess.

Each stuck test must fail within seconds with the stacks of the pending asyncio tasks and
of the threads in its failure, and the tests after it in the same run must still pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 0.5
"""Seconds, for the inner run (through WATCHKEEPER_TEST_TIMEOUT); the grace is as long."""

INNER_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
"""

INNER_TESTS = """\
import asyncio
import threading
import time

import pytest


async def stuck_in_an_await():
    await asyncio.Event().wait()


def parked_helper(event):
    event.wait()


def blocked_in_sync_code():
    time.sleep(600)


async def test_async_hang():
    await stuck_in_an_await()


def test_sync_hang():
    event = threading.Event()
    helper = threading.Thread(target=parked_helper, args=(event,), name="helper-thread")
    helper.start()
    try:
        blocked_in_sync_code()
    finally:
        event.set()
        helper.join()


async def test_passes_after_the_hangs():
    await asyncio.sleep(0.01)


async def test_cancellation_swallowed_by_cleanup():
    try:
        await stuck_in_an_await()
    finally:
        await asyncio.Event().wait()  # the cleanup hangs too


async def test_loop_blocked_by_sync_code():
    blocked_in_sync_code()


@pytest.fixture
async def fixture_that_hangs():
    await stuck_in_an_await()
    yield


async def test_stuck_in_fixture_setup(fixture_that_hangs):
    pass


@pytest.mark.timeout_seconds(10)
async def test_marker_gives_more_time():
    await asyncio.sleep(1.0)


def test_sync_passes_at_the_end():
    assert True
"""


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, ET.Element], str, float]:
    """Run the inner tests once; their junit test cases by name, the output, the wall time."""
    where = tmp_path_factory.mktemp("timeouts")
    (where / "pytest.ini").write_text(INNER_INI)
    (where / "test_stuck.py").write_text(INNER_TESTS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    env["WATCHKEEPER_TEST_TIMEOUT"] = str(TIMEOUT)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.timeouts", "-p", "no:cacheprovider",
         "-q", "--junitxml", str(where / "junit.xml"), "test_stuck.py"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    cases = {case.get("name", ""): case for case in ET.parse(where / "junit.xml").iter("testcase")}
    return cases, output, elapsed


def _failure(case: ET.Element, kind: str = "failure") -> str:
    found = case.find(kind)
    assert found is not None, f"{case.get('name')} has no {kind}"
    return f"{found.get('message', '')}\n{found.text or ''}"


def _quick(case: ET.Element, strikes: int = 1) -> None:
    assert float(case.get("time", "0")) < strikes * TIMEOUT + 3.0


def test_a_stuck_async_test_fails_fast_with_the_task_stack(
    inner_run: tuple[dict[str, ET.Element], str, float],
) -> None:
    cases, output, _ = inner_run
    case = cases["test_async_hang"]
    report = _failure(case)
    assert "Timeout: call of test_stuck.py::test_async_hang ran longer than 0.5 s" in report
    assert "pending asyncio task" in report
    assert "in stuck_in_an_await" in report  # the await chain, not only the outer coroutine
    assert "in test_async_hang" in report
    assert "stuck_in_an_await" in output
    _quick(case)


def test_a_stuck_sync_test_fails_fast_with_every_thread(
    inner_run: tuple[dict[str, ET.Element], str, float],
) -> None:
    cases, _, _ = inner_run
    case = cases["test_sync_hang"]
    report = _failure(case)
    assert "Timeout: call of test_stuck.py::test_sync_hang" in report
    assert "Thread MainThread (main, interrupted here)" in report
    assert "in blocked_in_sync_code" in report
    assert "Thread helper-thread" in report and "in parked_helper" in report
    _quick(case)


def test_the_run_goes_on_after_stuck_tests(
    inner_run: tuple[dict[str, ET.Element], str, float],
) -> None:
    cases, output, elapsed = inner_run
    for name in (
        "test_passes_after_the_hangs",
        "test_marker_gives_more_time",
        "test_sync_passes_at_the_end",
    ):
        assert list(cases[name]) == [] or all(
            child.tag in ("system-out", "system-err") for child in cases[name]
        ), f"{name} did not pass:\n{output}"
    assert "4 failed, 3 passed, 1 error" in output
    assert elapsed < 60


def test_a_test_that_swallows_the_cancellation_is_stopped_anyway(
    inner_run: tuple[dict[str, ET.Element], str, float],
) -> None:
    cases, _, _ = inner_run
    swallowed = cases["test_cancellation_swallowed_by_cleanup"]
    assert "(strike 2 of 3)" in _failure(swallowed)
    _quick(swallowed, strikes=2)
    blocked = cases["test_loop_blocked_by_sync_code"]
    assert "in blocked_in_sync_code" in _failure(blocked)
    _quick(blocked, strikes=2)


def test_a_stuck_async_fixture_fails_the_setup(
    inner_run: tuple[dict[str, ET.Element], str, float],
) -> None:
    cases, _, _ = inner_run
    case = cases["test_stuck_in_fixture_setup"]
    report = _failure(case, "error")
    assert "Timeout: setup of test_stuck.py::test_stuck_in_fixture_setup" in report
    assert "in fixture_that_hangs" in report and "in stuck_in_an_await" in report
    _quick(case)
