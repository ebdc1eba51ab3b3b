"""``scripts/run`` on a machine with no ``.env``: it makes one from ``.env.example`` and
says which line to fill in, before installing anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _checkout(tmp_path: Path) -> Path:
    """The files ``scripts/run`` uses, in a fresh directory (a checkout with no .env)."""
    (tmp_path / "scripts").mkdir()
    for name in ("scripts/run", "scripts/_venv.sh", ".env.example", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def _run(root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if "KEY" not in k and "BASE_URL" not in k}
    # Were the script to go on to install, it would fail at once on this interpreter.
    env.update(PYTHON=str(root / "no-such-python"), **extra)
    return subprocess.run(
        ["bash", str(root / "scripts" / "run")],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_first_run_without_env_makes_one_and_names_the_line(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    done = _run(root)
    assert done.returncode == 1
    assert (root / ".env").read_text() == (root / ".env.example").read_text()
    assert "Created .env from .env.example." in done.stderr
    assert "OPENAI_API_KEY=sk-" in done.stderr and "TELEGRAM_BOT_TOKEN" in done.stderr
    assert not (root / ".venv").exists()  # nothing installed

    again = _run(root)  # .env exists now: on to the install (here: the missing Python)
    assert again.returncode != 0 and "Created .env" not in again.stderr
    assert "no-such-python" in again.stderr


def test_a_key_in_the_environment_goes_straight_on(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    done = _run(root, OPENAI_API_KEY="sk-from-env")
    assert (root / ".env").exists() and "Fill in" not in done.stderr
    assert "no-such-python" in done.stderr  # went on to the install
