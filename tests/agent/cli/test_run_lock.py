"""``DATA_DIR/run.lock``: held for the life of ``watchkeeper run``, names its holder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cli.run_lock import AlreadyRunning, hold_run_lock


def test_the_run_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with hold_run_lock(data_dir):
        assert (data_dir / "run.lock").read_text().startswith(f"pid {os.getpid()}")
        with pytest.raises(AlreadyRunning) as info, hold_run_lock(data_dir):
            pass
        message = str(info.value)
        assert "\n" not in message
        assert f"pid {os.getpid()}" in message and str(data_dir) in message
    with hold_run_lock(data_dir):  # released: taken again at once
        pass
    assert (data_dir / "run.lock").read_text() == ""
