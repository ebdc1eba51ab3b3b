"""jinja2 loads on the dashboard's first page, not when ``watchkeeper run`` starts (most
owners never open the dashboard, and jinja2 costs about 2 MiB resident and tens of ms;
``tests/agent/app/test_lazy_imports.py`` checks a running app has not loaded it): the
pages still render, from one environment built once."""

from __future__ import annotations

import jinja2
import pytest

from agent.app.dashboard import context
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness


async def test_pages_share_one_environment_and_answer_html(
    dash: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[jinja2.Environment] = []
    build = context.template_env

    def counted() -> jinja2.Environment:
        built.append(build())
        return built[-1]

    monkeypatch.setattr(context, "template_env", counted)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/login", "/", "/alerts"):
        resp = await dash.client.get(path, headers=bearer)
        assert resp.status == 200, path
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
    assert len(built) == 1
