"""The durable messaging core, apart from the transports: the inbound ``pipeline``,
the ``outbox``, the ``inbox`` rows, the ``media`` store and ``text`` hygiene. It owns the
inbox, outbox and media collections. Nothing is imported here, so a transport that
cleans its text (``channels.delivery.text``) loads without the database client."""
