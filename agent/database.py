"""The database the settings name: ``MONGODB_URI``, or the embedded server in
``DATA_DIR`` when it is unset (``storage.db.open_database`` with the settings' values).
Used by ``build_app`` and by the commands that work beside a running agent."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from agent.config import Settings

if TYPE_CHECKING:
    from storage.db import Database
    from storage.embedded.owner import EmbeddedServer


def open_configured_database(
    settings: Settings, *, server: EmbeddedServer | None = None
) -> contextlib.AbstractAsyncContextManager[Database]:
    """``server``: the embedded server already launched (``watchkeeper run``), if any."""
    from storage.db import open_database  # pymongo: imported when a database is opened

    return open_database(
        settings.mongodb_uri,
        settings.mongodb_db,
        settings.data_dir,
        idle_timeout=settings.embedded_db_idle_timeout_seconds,
        server=server,
    )
