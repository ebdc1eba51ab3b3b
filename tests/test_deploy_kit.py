"""The deploy kit keeps the owner's data and stops on a setting that cannot work.

Docker's daemon is not available here, so the compose file is read as compose reads it
(``environment`` wins over ``env_file``), the build context is filtered the way
``.dockerignore`` says, and the systemd unit is checked by ``systemd-analyze verify``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def _service() -> dict[str, Any]:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service: dict[str, Any] = compose["services"]["watchkeeper"]
    return service


def _dotenv_example() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#") and "=" in line
    )
    return {name.strip(): value.strip() for name, value in pairs}


def test_the_data_stays_in_the_volume_whatever_the_env_file_says() -> None:
    service = _service()
    assert "DATA_DIR" in _dotenv_example()  # .env copied from the example sets it ...
    assert service["env_file"] == "../.env"
    assert service["environment"]["DATA_DIR"] == "/data"  # ... and compose's own wins
    assert "watchkeeper-data:/data" in service["volumes"]


def test_hints_inside_the_container_name_the_command_that_works_there() -> None:
    command = _service()["environment"]["WATCHKEEPER_CLI"]
    assert command.startswith("docker compose ") and command.endswith(
        " exec watchkeeper watchkeeper"
    )


def test_the_build_context_leaves_out_secrets_and_the_local_environments() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".env", "data"} <= patterns
    assert "!.env.example" in patterns
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert not copied & {".env", "data", ".venv"}
    for package in ("agent", "channels", "scheduler", "storage", "runtime"):
        assert f"COPY {package} {package}" in dockerfile, package


def test_the_image_can_have_npx_for_the_readmes_mcp_example() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "ARG WITH_NODE=0" in dockerfile and "nodejs npm" in dockerfile
    assert _service()["build"]["args"]["WITH_NODE"] == "${WITH_NODE:-0}"
    assert "WITH_NODE=1" in (ROOT / "README.md").read_text()


def _unit_options() -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for line in (DEPLOY / "watchkeeper.service").read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            name, value = line.split("=", 1)
            options.setdefault(name, []).append(value)
    return options


def test_systemd_stops_retrying_a_setting_that_cannot_work() -> None:
    options = _unit_options()
    assert options["RestartPreventExitStatus"] == ["2"]  # `watchkeeper run`: bad settings
    assert options["StartLimitBurst"] == ["5"] and options["StartLimitIntervalSec"] == ["300"]


def test_npx_servers_have_a_writable_cache_under_the_systemd_sandbox() -> None:
    options = _unit_options()
    assert options["ProtectHome"] == ["true"]
    (cache,) = (e.split("=", 1)[1] for e in options["Environment"] if e.startswith("npm_"))
    assert any(cache.startswith(path) for path in options["ReadWritePaths"])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_finds_nothing_wrong_in_the_unit(tmp_path: Path) -> None:
    # The unit as installed, with /opt/watchkeeper standing in a temporary folder.
    home = tmp_path / "opt" / "watchkeeper"
    (home / ".venv" / "bin").mkdir(parents=True)
    (home / "data").mkdir()
    program = home / ".venv" / "bin" / "watchkeeper"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    unit = tmp_path / "watchkeeper.service"
    unit.write_text(
        (DEPLOY / "watchkeeper.service").read_text().replace("/opt/watchkeeper", str(home))
    )
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Unknown" not in done.stderr and "unknown" not in done.stderr, done.stderr
