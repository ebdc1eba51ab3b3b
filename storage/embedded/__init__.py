"""The embedded SecantusDB server, used when ``MONGODB_URI`` is unset: its owner
(``owner``: one process per ``DATA_DIR`` starts it and stops it), where it runs: on a
thread of the owner's process by default (``inprocess``), or in a child process
(``server``, with ``EMBEDDED_DB_SEPARATE_PROCESS``) and then a child started before the
settings are read so that it loads meanwhile (``spare``); and what both use
(``serving``). Nothing is imported here: ``watchkeeper run`` starts the
spare before it loads anything else."""
