"""The optional parts ``build_app`` starts after the core, in order."""

from __future__ import annotations

from agent.app.alerts_feature import alerting_feature
from agent.app.mcp_feature import mcp_feature
from agent.app.pairing_feature import pairing_feature
from agent.app.parts import Feature
from agent.app.scheduling_feature import scheduling_feature
from agent.app.whatsapp_feature import whatsapp_feature

FEATURES: tuple[Feature, ...] = (
    pairing_feature,
    mcp_feature,  # before the scheduler: its runs may call MCP tools; stops after it
    alerting_feature,
    scheduling_feature,
    whatsapp_feature,
)
