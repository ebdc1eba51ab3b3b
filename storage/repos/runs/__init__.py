"""Run records: the typed record (``record``) and its store (``store``)."""
