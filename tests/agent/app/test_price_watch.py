"""The owner asks "every 15 minutes check the page and tell me if the price changes"
(issue 40, item 4): the model reads, in manage_monitor's schema, that a ``change``
monitor's keyword is a label that stays beside the value (the price itself vanishes
when it changes, and the owner would hear "keyword no longer finds anything") and
that fetch_url shows no markup to pick a selector from; a monitor made that way tells
the new price, before and after."""

from __future__ import annotations

from agent.llm.types import ToolResultPart
from tests.agent.app.test_change_monitors import FAST, alerts, baseline, one_alert, shop
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.fakes.page_site import page_site
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import tool_call


async def test_a_price_watch_keys_on_a_label_and_tells_the_new_price(app_db: AppDb) -> None:
    model = ScriptedModel(lambda _r: "ok")
    async with (
        page_site(shop("249.00")) as site,
        alert_app(app_db, model=model, features=(FAST,)) as h,
    ):
        watch = {"name": "Kettle price", "kind": "change", "url": site.url, "keyword": "Kettle"}
        create = tool_call("manage_monitor", action="create", interval_seconds=1, **watch)
        model.responder = sequence(create, "I'll tell you when the price changes.")
        await h.chat.say(f"Every 15 minutes check {site.url} and tell me if the price changes")
        await h.settle()
        spec = {t.name: t for t in model.requests[0].tools}["manage_monitor"]
        fields = spec.model_dump()["parameters"]["properties"]
        [created] = [
            p.result
            for m in model.requests[-1].messages
            for p in m.parts
            if isinstance(p, ToolResultPart)
        ]
        await baseline(h, created["created"]["id"])
        site.html = shop("239.00")
        alert = await one_alert(h, "the new price told")
        titles = [a["title"] for a in await alerts(h)]

    assert fields["keyword"]["description"] == (
        "http: text the body must hold; change: compare ~200 chars around it "
        "(a label that stays, not the value watched)"
    )
    assert "fetch_url shows no markup" in fields["selector"]["description"]
    assert alert["title"] == "Kettle price changed"
    assert "before: Kettle 249.00 EUR" in alert["body"]
    assert "after: Kettle 239.00 EUR" in alert["body"]
    assert titles == ["Kettle price changed"]  # not "keyword no longer finds anything"
