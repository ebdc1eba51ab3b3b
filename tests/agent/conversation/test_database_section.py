"""The prompt's database section names every collection ``db_query`` can read (issue
40, item 10): the readable set is derived from the code (the protected collections
less those holding secrets, and the ones the model may write), so a collection added
later cannot be left out of what the model is told."""

from __future__ import annotations

import re
from pathlib import Path

from storage import collections as c
from storage.sandbox.rules import SECRET_HOLDERS
from tests.agent.conversation.test_hi_tokens import owner_app
from tests.contexts import owner_ctx
from tests.databases import AppDb


def readable() -> set[str]:
    """Every collection ``db_query`` reads (``ai_*`` aside: the model names its own)."""
    return (set(c.PROTECTED) - set(SECRET_HOLDERS)) | set(c.MODEL_WRITABLE)


def named_in(section: str) -> set[str]:
    """The collection names a section's lines name as words."""
    return set(re.findall(r"[a-z][a-z_]*[a-z]", section))


async def test_the_database_section_names_every_readable_collection_and_no_secret(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with owner_app(app_db, tmp_path) as (app, model):
        await app.agent.respond("what is in my database?", owner_ctx(app.deps))
    system = model.requests[0].system
    section = system[system.index("## Your database") : system.index("### Your collections")]
    words = named_in(section)
    assert readable() <= words, sorted(readable() - words)
    assert not set(SECRET_HOLDERS) & words  # pairing codes are never offered
    assert "outbox (sent)" in section and "monitor_checks" in section
