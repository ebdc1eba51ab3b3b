"""The optional parts ``build_app`` starts after the core, in order."""

from __future__ import annotations

from agent.alerting import alerting_feature
from agent.app import Feature
from agent.scheduling import scheduling_feature
from agent.whatsapp_feature import whatsapp_feature

FEATURES: tuple[Feature, ...] = (alerting_feature, scheduling_feature, whatsapp_feature)
