"""Every bad setting stops ``watchkeeper run`` with one line and a non-zero exit, no
traceback (issue #11): a DATA_DIR that is a file or cannot be written, a MongoDB that
does not answer, an HTTP_HOST that cannot be bound, a port in use, a ``.env`` that is
not UTF-8."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.cli.procs import free_port, run_env


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "agent", *(args or ("run",))],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _one_line_error(code: int, stdout: str, stderr: str) -> str:
    """The error line, after checking there is one and nothing like a traceback."""
    assert code != 0, stdout + stderr
    assert "Traceback" not in stdout + stderr, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("watchkeeper: "), stderr
    return last


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in, even as root."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        (locked / "probe").touch()
    except OSError:
        return locked
    (locked / "probe").unlink()
    for path in (Path("/sys/fs"), Path("/proc/sys")):  # root: kernel file systems refuse
        probe = path / "watchkeeper-probe"
        try:
            probe.touch()
        except OSError:
            return path
        probe.unlink()
    pytest.skip("no directory here refuses writes")


def test_a_data_dir_that_is_a_file_or_unwritable(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    cases = [
        (afile, "is a file, not a directory"),
        (afile / "data", "part of that path is a file"),
        (_unwritable_dir(tmp_path), "is not writable"),
    ]
    for data_dir, why in cases:
        env = run_env(tmp_path, 0, DATA_DIR=str(data_dir))
        line = _one_line_error(*_run(tmp_path, env))
        assert line.startswith("watchkeeper: invalid setting DATA_DIR: ") and why in line
        # The other commands that keep data there say the same.
        line = _one_line_error(*_run(tmp_path, env, "schedule"))
        assert why in line


def test_a_mongodb_that_does_not_answer(tmp_path: Path) -> None:
    port = free_port()
    uri = f"mongodb://wk:pa55word@127.0.0.1:{port}/?serverSelectionTimeoutMS=300"
    code, out, err = _run(tmp_path, run_env(tmp_path, 0, MONGODB_URI=uri))
    line = _one_line_error(code, out, err)
    assert line.startswith(f"watchkeeper: cannot reach MongoDB at 127.0.0.1:{port} (MONGODB_URI)")
    assert "pa55word" not in out + err


@pytest.mark.parametrize(
    ("host", "setting"),
    [("203.0.113.77", "HTTP_HOST"), ("a..b", "HTTP_HOST"), ("127.0.0.1", "HTTP_PORT")],
    ids=["not-ours", "unresolvable", "port-in-use"],
)
def test_an_http_host_or_port_that_cannot_be_bound(tmp_path: Path, host: str, setting: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if setting == "HTTP_PORT" else 0
        env = run_env(tmp_path, port, HTTP_HOST=host)
        line = _one_line_error(*_run(tmp_path, env))
    assert line.startswith(f"watchkeeper: invalid setting {setting}: "), line
    # Refused before anything started: no database was opened in DATA_DIR.
    assert not (tmp_path / "data" / "db").exists()


def test_an_env_file_that_is_not_utf8(tmp_path: Path) -> None:
    raw = b"TIMEZONE=Europe/Berlin\nOWNER_PHONE=+1555\xe9\n"  # Latin-1, say
    (tmp_path / ".env").write_bytes(raw)
    code, out, err = _run(tmp_path, run_env(tmp_path, 0))
    line = _one_line_error(code, out, err)
    assert line == (
        f"watchkeeper: cannot read .env: it is not UTF-8 (byte 0xe9 at {raw.index(0xE9)}); "
        "save the file as UTF-8"
    )
