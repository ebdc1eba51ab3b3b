"""Alerts: severity routing, escalation and the owner's reply directives."""
