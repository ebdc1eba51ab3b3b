"""The optional parts ``build_app`` starts after the core, in order."""

from __future__ import annotations

from agent.app.alerts_feature import alerting_feature
from agent.app.parts import Feature
from agent.app.scheduling_feature import scheduling_feature
from agent.app.whatsapp_feature import whatsapp_feature

FEATURES: tuple[Feature, ...] = (alerting_feature, scheduling_feature, whatsapp_feature)
