"""The bookkeeping of scheduled fires: each fire claimed once (``claims``), its run
recorded and held by a lease (``records``), recorded end to end (``recorder``), tried
again inside its grace window (``retries``), and work a process left unfinished found
and finished (``recovery``)."""
