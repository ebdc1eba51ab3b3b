"""The admin API's bearer check: case-insensitive scheme, exact token, nothing else."""

from __future__ import annotations

import pytest

from agent.app.access import bearer_matches

TOKEN = "k3y-0123456789abcdef"


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN} "])
def test_the_scheme_is_case_insensitive(header: str) -> None:
    assert bearer_matches(header, TOKEN)


@pytest.mark.parametrize(
    "header",
    ["", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ", f"Bearer{TOKEN}", "Bearer \udcff"],
)
def test_anything_else_is_refused(header: str) -> None:
    assert not bearer_matches(header, TOKEN)
