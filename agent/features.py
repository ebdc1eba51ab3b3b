"""The optional parts ``build_app`` starts after the core, in order."""

from __future__ import annotations

from agent.app import Feature

FEATURES: tuple[Feature, ...] = ()
