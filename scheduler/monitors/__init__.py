"""Monitors, checks that run without the model: a monitor as a value and its settings
(``monitor``), its collection (``store``), one http check (``check``), what the owner is
told and when (``news``: flap damping, one message per five minutes), and ``Monitors``,
the service that runs them and answers the tool, the API and the pings (``service``)."""
