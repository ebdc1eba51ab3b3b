"""``watchkeeper`` keeps httpx's command-line client (click, rich) out of memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_httpx_works_without_its_cli_modules() -> None:
    code = (
        "from agent.cli.lean import skip_unused_imports; skip_unused_imports();"
        "import sys, httpx, telegram;"
        "httpx.Client().close();"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'click', 'rich', 'pygments'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_a_module_already_imported_is_left_alone() -> None:
    code = (
        "import httpx._main, sys; from agent.cli.lean import skip_unused_imports;"
        "skip_unused_imports(); print(sys.modules['httpx._main'] is not None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "True", done.stderr


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_telegram_loads_without_httpx_and_the_channel_works() -> None:
    code = (
        "from agent.cli.lean import without_ptb_httpx; without_ptb_httpx();"
        "import sys, telegram, channels.telegram;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'httpx', 'httpcore', 'h11'}));"
        "print('aiohttp.web' in sys.modules);"  # the HTTP server's, loaded after the first poll
        "c = channels.telegram.TelegramChannel(token='1:a', base_url='http://127.0.0.1:9');"
        "print(type(c).__name__);"
        "import httpx; httpx.Client().close(); print('httpx still imports')"
    )
    assert _run(code).splitlines() == ["[]", "False", "TelegramChannel", "httpx still imports"]


def test_a_bot_without_a_transport_is_refused_clearly() -> None:
    code = (
        "from agent.cli.lean import without_ptb_httpx; without_ptb_httpx();"
        "import telegram\n"
        "try: telegram.Bot('1:a')\n"
        "except RuntimeError as exc: print(exc)"
    )
    assert "pass request= and get_updates_request=" in _run(code)


def test_once_telegram_is_loaded_its_httpx_transport_stays() -> None:
    code = (
        "import telegram; from agent.cli.lean import without_ptb_httpx; without_ptb_httpx();"
        "from telegram.request import HTTPXRequest; print(HTTPXRequest.__module__, end=' ');"
        "print(type(HTTPXRequest()).__name__)"
    )
    assert _run(code) == "telegram.request._httpxrequest HTTPXRequest"
