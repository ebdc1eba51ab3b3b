"""The install hint names a command that works: Watchkeeper is not on PyPI, so an extra
comes from the checkout (``pip install -e '.[gemini]'``), with this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent.config import install_command

ROOT = Path(__file__).resolve().parents[2]


def test_from_the_checkout_the_hint_is_typed_as_from_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    python = Path(sys.executable)
    shown = str(python.relative_to(ROOT)) if python.is_relative_to(ROOT) else str(python)
    assert install_command("gemini") == f"{shown} -m pip install -e '.[gemini]'"


def test_elsewhere_the_hint_names_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert install_command("mcp") == f"{sys.executable} -m pip install -e '{ROOT}[mcp]'"
