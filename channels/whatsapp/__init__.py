"""The WhatsApp channel on neonize: ``WhatsAppChannel`` and the client factory it takes."""

from channels.whatsapp.channel import ClientFactory, WhatsAppChannel, neonize_client

__all__ = ["ClientFactory", "WhatsAppChannel", "neonize_client"]
