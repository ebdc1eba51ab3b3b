"""The embedded SecantusDB server, used when ``MONGODB_URI`` is unset: its owner
(``owner``: one process per ``DATA_DIR`` starts it and stops it), the child process
that runs it (``server``), and a child started before the settings are read so that it
loads meanwhile (``spare``). Nothing is imported here: ``watchkeeper run`` starts the
spare before it loads anything else."""
