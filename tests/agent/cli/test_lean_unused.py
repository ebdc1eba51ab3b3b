"""``watchkeeper`` keeps trio, and cryptography unless MCP needs it, out of memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.cli.lean import unused_by
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[3]


def _loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    script = (
        f"{code}\nimport sys, json\n"
        f"print(json.dumps(sorted(m for m, v in sys.modules.items()"
        f" if v is not None and m.split('.')[0] in {prefixes!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_httpx_and_telegram_work_without_trio() -> None:
    code = (
        "from agent.cli.lean import skip_unused_imports; skip_unused_imports()\n"
        "import asyncio, httpx, telegram\n"
        "asyncio.run(httpx.AsyncClient().aclose())"
    )
    assert _loaded(code, ("trio",)) == []


def test_telegram_works_without_cryptography() -> None:
    code = (
        "from agent.cli.lean import UNUSED, skip_unused_imports\n"
        "skip_unused_imports((*UNUSED, 'cryptography'))\n"
        "from channels.telegram import TelegramChannel\n"
        "TelegramChannel('123:abc', 'http://127.0.0.1:9')"
    )
    assert _loaded(code, ("cryptography",)) == []


def test_cryptography_is_kept_only_for_mcp(tmp_path: Path) -> None:
    assert unused_by(make_settings(data_dir=tmp_path)) == ("cryptography",)
    (tmp_path / "mcp.json").write_text('{"mcpServers": {}}')
    assert unused_by(make_settings(data_dir=tmp_path)) == ()
