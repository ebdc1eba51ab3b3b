"""Exact o200k token counts for tests and benchmarks (the offline ``quicktok`` tables).

The running agent only estimates (agent.conversation.history.estimate_tokens); this is the
yardstick that estimate and the token targets are measured against.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import quicktok

    return quicktok.get_encoding("o200k_base")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text))
