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
