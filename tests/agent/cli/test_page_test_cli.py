"""``watchkeeper page-test`` (issue 39, item 2): against the running app's real HTTP
server, one line per step with a time, the last line saying whether the page reached
the owner and how it was acknowledged; a clear line and a non-zero exit when nothing
runs, or when nobody acknowledges."""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.command import cli_command
from agent.cli.page_test import page_test
from agent.config import Settings
from tests.agent.alerts.page_test_kit import press
from tests.agent.cli.procs import free_port, run_env
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, Harness, alert_app
from tests.fakes.twilio_api import twilio_error
from tests.waiting import until

STEP_LINE = re.compile(r"^\d\d:\d\d:\d\d  \S")


def _settings_for(h: Harness) -> Settings:
    port = h.client.server.port
    assert port is not None
    return make_settings(http_host="127.0.0.1", http_port=port, admin_token=ADMIN)


async def test_each_step_in_order_then_how_it_was_acknowledged(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        out = io.StringIO()
        settings = _settings_for(h)
        running = asyncio.create_task(page_test(settings, wait=120, step=0, out=out, poll=0.02))
        await until(lambda: "call: ringing" in out.getvalue(), "the call line")
        assert await press(h, "4") == 200
        assert await running == 0

        printed = out.getvalue().splitlines()
        assert printed[0].startswith("Test page #") and "press 4 on the call" in printed[0]
        steps = printed[1:-1]
        assert all(STEP_LINE.match(line) for line in steps), steps
        assert [line[10:] for line in steps] == [
            "started: chat, sms, call",
            "chat: sent on telegram",
            "sms: sent to +15…0100",
            "call: ringing +15…0100",
            "call: key 4 pressed",
            "acknowledged by call key press",
            "ended: acknowledged by call key press",
        ]
        assert printed[-1] == "OK: the page reached you (acknowledged by call key press)."


async def test_nobody_acknowledges_exit_non_zero(app_db: AppDb) -> None:
    async with alert_app(app_db, twilio_voice_calls="off") as h:
        out = io.StringIO()
        settings = _settings_for(h)
        code = await page_test(settings, wait=1, step=0, out=out, poll=0.02)
        printed = out.getvalue().splitlines()
        assert code == 1
        assert printed[-2].endswith("ended: not acknowledged within 1 s")
        assert printed[-1] == "NOT ACKNOWLEDGED: nobody answered the test page."
        assert any(line.endswith("call: skipped (TWILIO_VOICE_CALLS=off)") for line in printed)


async def test_a_refused_sms_is_named_in_the_last_line_with_where_to_look(
    app_db: AppDb,
) -> None:
    """Twilio refusing the test's SMS (a wrong auth token): the last line names the step
    that failed, points at the lines above and at ``doctor``, in words for 3 a.m."""
    async with alert_app(app_db, twilio_voice_calls="off") as h:
        h.twilio.push(twilio_error(401, 20003, "Authenticate"))
        out = io.StringIO()
        code = await page_test(_settings_for(h), wait=1, step=0, out=out, poll=0.02)
    printed = out.getvalue().splitlines()
    assert code == 1
    assert any("sms: FAILED (twilio answered 401" in line for line in printed[1:-1])
    assert printed[-1] == (
        "NOT ACKNOWLEDGED: nobody answered the test page, and sms failed (above); "
        f"`{cli_command()} doctor` checks why."
    )


async def test_without_admin_token_it_says_what_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = await page_test(make_settings(http_port=free_port()), out=io.StringIO())
    assert code == 2
    assert "needs ADMIN_TOKEN in .env" in capsys.readouterr().err


def test_not_running_says_so_and_how_to_start_it(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "page-test", "--wait", "5s"],
        cwd=tmp_path,
        env=run_env(tmp_path, port),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert f"watchkeeper is not running (nothing answers at http://127.0.0.1:{port})" in (
        proc.stderr
    )
    assert re.search(r"start it with `[^`]* run`, then try again", proc.stderr), proc.stderr
