"""Tool schemas are built once per class and shared by every request: sending them
through either provider's SDK leaves them as they were (a change would leak into every
later request), and what goes on the wire is the schema itself."""

from __future__ import annotations

import copy

import pytest

from agent.context import AgentDeps
from agent.llm.base import ModelClient
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.tools.alerts import MANAGE_ALERTS, RAISE_ALERT
from agent.tools.base import Toolset, compact_schema
from agent.tools.catalog import core_catalog
from agent.tools.cron import MANAGE_CRONJOB
from agent.tools.pulse import MANAGE_PULSE
from agent.tools.settings import MANAGE_SETTINGS
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY, Kit, run
from tests.contexts import owner_ctx
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


async def test_requests_through_both_sdks_leave_the_shared_schemas_unchanged(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    core = list(core_catalog().for_context(owner_ctx(deps)))
    tools = Toolset(
        [*core, MANAGE_CRONJOB, MANAGE_PULSE, RAISE_ALERT, MANAGE_ALERTS, MANAGE_SETTINGS]
    )
    assert len(tools.specs()) >= 8
    before = {spec.name: copy.deepcopy(spec.parameters) for spec in tools.specs()}
    models: list[ModelClient] = [
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
    ]
    for _ in range(2):
        openai_api.reply_text("done")
        gemini_api.reply_text("done")
    for model in models:
        try:
            for _ in range(2):
                await run(model, Kit(tools=Toolset(list(tools))), deps)
        finally:
            await model.aclose()
    after = {spec.name: spec.parameters for spec in tools.specs()}
    assert after == before
    sent = {
        t["function"]["name"]: t["function"]["parameters"] for t in openai_api.bodies[-1]["tools"]
    }
    assert sent == before
    for tool in tools:
        assert compact_schema(tool.args) is compact_schema(tool.args)  # built once
