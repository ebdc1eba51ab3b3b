"""The first run as a newcomer lives it, with real processes: ``watchkeeper run`` with
only a model key and a bot token (fake Bot API, fake OpenAI), a message to the bot,
then ``watchkeeper pair CODE`` beside the running process, on its embedded database."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.conversation.pairing import welcome as welcome_text
from tests.agent.cli.procs import free_port, output_of, run_env, start, wait_healthy
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import TOKEN, FakeTelegram

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
NEWCOMER = 4242


def watchkeeper(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_pairing_beside_a_running_watchkeeper(tmp_path: Path) -> None:
    port = free_port()
    async with FakeTelegram() as bot, FakeOpenAI() as model:
        env = run_env(
            tmp_path,
            port,
            OPENAI_BASE_URL=model.base_url,
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=bot.url,
        )
        proc = start(env, tmp_path)
        try:
            await asyncio.to_thread(wait_healthy, proc, port, 30)
            message = bot.message(NEWCOMER, text="hi, I set you up")
            message["from"]["username"] = "newcomer"
            bot.push_update({"message": message})
            [shown] = await bot.wait_sent(1, within=15)
            found = re.search(r" pair (\d{6})", shown.visible)
            assert found is not None, shown.visible
            code = found.group(1)

            listed = await asyncio.to_thread(watchkeeper, env, tmp_path, "pair", "--list")
            assert listed.returncode == 0, listed.stderr
            line = f" pair {code}` to make @newcomer (Telegram 4242) the owner"
            assert line in listed.stdout
            bad = await asyncio.to_thread(watchkeeper, env, tmp_path, "pair", "12345")
            assert bad.returncode == 2 and "6 digits" in bad.stderr
            done = await asyncio.to_thread(watchkeeper, env, tmp_path, "pair", code)
            assert done.returncode == 0, done.stderr
            assert "@newcomer (Telegram 4242) is now an owner" in done.stdout
            again = await asyncio.to_thread(watchkeeper, env, tmp_path, "pair", code)
            assert again.returncode == 2 and "no pending pairing code" in again.stderr

            welcome = (await bot.wait_sent(2, within=15))[1]  # sent by the running outbox
            assert (welcome.chat_id, welcome.visible) == (
                str(NEWCOMER),
                welcome_text(zone_known=False),
            )
            model.reply_text("Hello, you are my owner now.")
            bot.push_text(NEWCOMER, "what can you do?")
            answer = (await bot.wait_sent(3, within=15))[2]
            assert answer.visible == "Hello, you are my owner now."
            assert len(model.requests) == 1 and "I set you up" not in model.user_text(0)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            out = await asyncio.to_thread(output_of, proc)
    assert f" pair {code}` to make @newcomer (Telegram 4242) the owner" in out
