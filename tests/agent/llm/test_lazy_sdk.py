"""The OpenAI SDK loads off the start-up path and off the event loop (``lazy_sdk``)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.llm.lazy_sdk import LazyImport, warm_model
from agent.llm.openai.model import OpenAIModel
from agent.llm.resilient import ResilientModel
from agent.llm.types import user_message
from tests.agent.llm.llm_kit import OPENAI_KEY
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["openai_api"]
ROOT = Path(__file__).resolve().parents[3]


def test_the_app_imports_without_the_sdk() -> None:
    code = (
        "import sys, agent.app.core, agent.app.http, agent.cli.main, agent.llm.factory;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'google'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr


async def test_a_request_loads_no_second_http_stack(openai_api: FakeOpenAI) -> None:
    """The SDK's requests go over aiohttp: httpcore2 (and trio, where installed) stay out."""
    openai_api.reply_text("hello")
    code = (
        "import asyncio, json, sys\n"
        "from agent.llm.openai.model import OpenAIModel\n"
        "from agent.llm.types import user_message\n"
        "async def main():\n"
        "    model = OpenAIModel('sk-test', 'gpt-test', base_url=sys.argv[1])\n"
        "    answer = await model.request('', [user_message('hi')], [])\n"
        "    await model.aclose()\n"
        "    return answer.message.text\n"
        "text = asyncio.run(main())\n"
        "print(json.dumps([text, sorted({'httpcore2', 'trio', 'h11'} & set(sys.modules))]))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, openai_api.base_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["hello", []]


async def test_the_first_request_loads_it_and_answers(openai_api: FakeOpenAI) -> None:
    openai_api.reply_text("hello")
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    response = await model.request("be brief", [user_message("hi")], [])
    assert response.message.text == "hello"
    await model.aclose()


async def test_warming_a_wrapper_makes_the_client_once(openai_api: FakeOpenAI) -> None:
    inner = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    model = ResilientModel(inner)
    await asyncio.gather(warm_model(model), warm_model(model), inner.warm())
    client = inner._client
    assert client is not None
    openai_api.reply_text("warm")
    assert (await model.request("", [user_message("hi")], [])).message.text == "warm"
    assert inner._client is client
    await model.aclose()


async def test_concurrent_waits_share_one_import() -> None:
    lazy = LazyImport("json")
    threads: list[str] = []  # one entry per import started
    real = lazy._load

    async def load() -> object:
        threads.append(threading.current_thread().name)
        return await real()

    lazy._load = load  # type: ignore[method-assign]
    await asyncio.gather(lazy.ready(), lazy.ready(), lazy.ready())
    assert len(threads) == 1


async def test_a_failed_import_is_reported_again_and_warming_only_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lazy = LazyImport("no_such_module_wk14")
    with pytest.raises(ModuleNotFoundError):
        await lazy.ready()
    with pytest.raises(ModuleNotFoundError):
        await lazy.ready()

    class Broken:
        async def warm(self) -> None:
            await lazy.ready()

    with caplog.at_level(logging.WARNING):
        await warm_model(Broken())
        await warm_model(object())  # nothing to warm: nothing happens
    assert "loading the model's SDK failed" in caplog.text
