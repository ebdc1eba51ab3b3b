"""The Telegram channel: ``TelegramChannel`` (long polling or webhook) and its parts."""

from channels.telegram.channel import TelegramChannel

__all__ = ["TelegramChannel"]
