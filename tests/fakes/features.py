"""Features for tests: one that provides a stand-in service (a recording alert router,
a scripted MCP manager), and one that contributes given parts, as a real feature would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agent.app.application import Feature, FeatureContext, Parts, Services


def providing(**services: Any) -> Feature:
    """A feature providing ``services`` (``Services``' fields: ``alerts``, ``mcp``...)
    to every run, listed before the features that use them."""
    given = Services(**services)

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts(services=given)

    return feature


def contributing(parts: Parts) -> Feature:
    """A feature contributing ``parts`` (a resolver, a tool) and starting nothing."""

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield parts

    return feature
