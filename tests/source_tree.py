"""The product's own source, for the tests that read it rather than run it (the layout,
one clock, one retry loop, dependencies through their public API, the record boundary).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "channels", "scheduler", "storage", "runtime")
"""The product's top-level packages."""


def modules(packages: Iterable[str] = PACKAGES) -> list[Path]:
    """Every module under ``packages`` (folders of the project), in a stable order."""
    found: list[Path] = []
    for package in packages:
        folder = ROOT / package
        assert folder.is_dir(), f"{package} is not a folder of the project"
        found += sorted(folder.rglob("*.py"))
    return found
