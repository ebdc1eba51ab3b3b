"""``scripts/run`` on a machine with no ``.env``: it makes one from ``.env.example`` and
says which line to fill in, before installing anything. And ``scripts/_venv.sh``
compiles the project's modules ahead, again once a source changes."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
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
    env["PYTHON"] = str(root / "no-such-python")
    env.update(extra)
    return subprocess.run(
        ["bash", str(root / "scripts" / "run")],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_first_run_without_env_makes_one_and_names_the_line(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    done = _run(root)
    assert done.returncode == 1
    written = (root / ".env").read_text().splitlines()
    example = (root / ".env.example").read_text().splitlines()
    assert len(written) == len(example)
    assert [a for a, b in zip(written, example, strict=True) if a != b] == [
        next(line for line in written if line.startswith("ADMIN_TOKEN="))
    ]
    assert "Created .env from .env.example, with a new ADMIN_TOKEN" in done.stderr
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


def _installed_checkout(tmp_path: Path) -> Path:
    """A checkout whose .venv counts as installed (its stamp matches), with one module in
    each of the project's packages; its ``python`` is this interpreter."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "_venv.sh", tmp_path / "scripts" / "_venv.sh")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for package in ("agent", "channels", "scheduler", "storage", "runtime"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text("X = 1\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    digest = hashlib.sha1((tmp_path / "pyproject.toml").read_bytes()).hexdigest()[:12]
    (tmp_path / ".venv" / f".installed-dev-{digest}").touch()
    return tmp_path


def _source_venv(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        ["bash", "-c", "source scripts/_venv.sh dev"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


def test_the_modules_are_compiled_ahead_and_again_once_changed(tmp_path: Path) -> None:
    root = _installed_checkout(tmp_path)

    def compiled(package: str) -> Path:
        return Path(importlib.util.cache_from_source(str(root / package / "m.py")))

    _source_venv(root)  # PYTHONDONTWRITEBYTECODE set, as some hosts and images do
    for package in ("agent", "channels", "scheduler", "storage", "runtime"):
        assert compiled(package).is_file(), package
    before = {p: compiled(p).read_bytes() for p in ("agent", "channels")}

    source = root / "agent" / "m.py"
    source.write_text("X = 2\n")
    later = (root / ".venv" / ".compiled").stat().st_mtime + 5
    os.utime(source, (later, later))
    _source_venv(root)
    assert compiled("agent").read_bytes() != before["agent"]  # compiled again
    assert compiled("channels").read_bytes() == before["channels"]


def test_the_new_env_gets_a_random_admin_token(tmp_path: Path) -> None:
    tokens = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        root = _checkout(tmp_path / name)
        done = _run(root)
        assert done.returncode == 1 and "new ADMIN_TOKEN" in done.stderr
        lines = (root / ".env").read_text().splitlines()
        [token] = [line.removeprefix("ADMIN_TOKEN=") for line in lines if "ADMIN_TOKEN=" in line]
        assert len(token) >= 32 and token.isalnum()
        assert (root / ".env").stat().st_mode & 0o077 == 0  # the owner's alone
        tokens.append(token)
        # Otherwise the example as it is.
        example = (root / ".env.example").read_text().splitlines()
        assert [line for line in lines if "ADMIN_TOKEN" not in line] == [
            line for line in example if "ADMIN_TOKEN" not in line
        ]
    assert tokens[0] != tokens[1]
    # The settings accept it as it was written.
    from agent.config import load_settings

    settings = load_settings(_env_file=str(tmp_path / "one" / ".env"))
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == tokens[0]


def _extras_asked(root: Path, **extra: str) -> str:
    """The extras ``scripts/run`` installs, as it says before it makes .venv (here with a
    Python that passes the version check and then fails)."""
    python = root / "fails-after-check"
    python.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\necho no-such-python >&2\nexit 1\n')
    python.chmod(0o755)
    done = _run(root, OPENAI_API_KEY="sk-from-env", **extra, PYTHON=str(python))
    assert "no-such-python" in done.stderr
    line = next(x for x in done.stderr.splitlines() if "installing into .venv" in x)
    return line.split("(", 1)[1].split(")", 1)[0]


def test_the_whatsapp_extra_is_installed_only_when_whatsapp_is_on(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    assert _extras_asked(root) == "embedded"  # the example says WHATSAPP_ENABLED=false
    assert _extras_asked(root, WHATSAPP_ENABLED="true") == "embedded,whatsapp"
    env_file = root / ".env"
    env_file.write_text(
        env_file.read_text().replace("WHATSAPP_ENABLED=false", "WHATSAPP_ENABLED=True")
    )
    assert _extras_asked(root) == "embedded,whatsapp"
    assert _extras_asked(root, WHATSAPP_ENABLED="false") == "embedded"


def test_the_gemini_extra_is_installed_only_when_gemini_is_used(tmp_path: Path) -> None:
    """Google's SDK brings google-auth and cryptography (which python-telegram-bot then
    imports at every start): only a configuration that uses Gemini installs it."""
    root = _checkout(tmp_path)
    assert _extras_asked(root) == "embedded"  # OpenAI's key only
    assert _extras_asked(root, GEMINI_API_KEY="g-key") == "embedded,gemini"
    assert _extras_asked(root, LLM_FALLBACK="Gemini") == "embedded,gemini"
    env_file = root / ".env"
    env_file.write_text(env_file.read_text().replace("GEMINI_API_KEY=\n", "GEMINI_API_KEY=g\n"))
    both = _extras_asked(root, WHATSAPP_ENABLED="1")
    assert both == "embedded,whatsapp,gemini"


def test_the_mcp_extra_is_installed_only_with_an_mcp_servers_file(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    assert _extras_asked(root) == "embedded"
    assert _extras_asked(root, MCP_CONFIG="/etc/mcp.json") == "embedded,mcp"
    (root / "data").mkdir()
    (root / "data" / "mcp.json").write_text('{"mcpServers": {}}')
    assert _extras_asked(root) == "embedded,mcp"  # DATA_DIR/mcp.json, DATA_DIR unset
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _extras_asked(root, DATA_DIR=str(elsewhere)) == "embedded"
