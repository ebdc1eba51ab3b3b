"""Monitors, checks that run without the model: the limits and settings rules
(``monitor``), creating and changing monitors by them (``store``; the record and its
collection are ``storage.repos.monitor_record`` and ``storage.repos.monitors``), one
http check (``check``), a page watched for changes (``change``), what the owner is told
and when (``news``: flap damping, one message per five minutes), uptime figures
(``history``), and ``Monitors``, the service that runs them and answers the tool, the
API and the pings (``service``)."""
