"""Start-up errors the command line reports in one line, importable without pymongo
(``watchkeeper run`` launches the embedded database before it imports the driver)."""

from __future__ import annotations


class DatabaseUnavailable(RuntimeError):
    """The database cannot be used as configured; the message is one line that names
    ``MONGODB_URI`` (never its credentials)."""
