"""The optional parts ``build_app`` starts after the core: one module each, and their order.
(What a channel gives the agent, WhatsApp's tools and resolver, comes first, from the
channel registry: ``agent.app.registry``.)

A feature decides from the settings whether to start; if it does, it starts what it
owns, yields its parts (tools, commands, routes, status sections, services) and stops
after its ``yield`` (``agent.app.application.Feature``)."""

from __future__ import annotations

from agent.app.application import Feature
from agent.app.features.alerts import alerting_feature
from agent.app.features.mcp import mcp_feature
from agent.app.features.memory import memory_feature
from agent.app.features.monitors import monitoring_feature
from agent.app.features.pairing import pairing_feature
from agent.app.features.scheduling import scheduling_feature
from agent.app.healthcheck import healthcheck_feature

FEATURES: tuple[Feature, ...] = (
    pairing_feature,
    mcp_feature,  # before the scheduler: its runs may call MCP tools; stops after it
    alerting_feature,
    monitoring_feature,  # after the alert router, which it raises its alerts through
    scheduling_feature,
    memory_feature,  # the facts' daily consolidation, in quiet hours
    healthcheck_feature,  # last: reads every part before it, stops first
)
