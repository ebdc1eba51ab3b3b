"""The pulse (heartbeat): its slots on the owner's waking day and quiet hours, pure
(``grid``), and its settings and counters in the database (``store``)."""
