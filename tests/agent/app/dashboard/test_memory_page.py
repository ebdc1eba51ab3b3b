"""The Memory page: saved facts with their source and date, search, edit and delete by
POST with CSRF, and a consolidation (duplicates merged, past dates marked) undone."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from storage.repos.memories import FactSource
from tests.agent.app.dashboard.pages_kit import AUTH, NOW, client_of, csrf_of, dash_app, page
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel

pytestmark = pytest.mark.clock(NOW)


async def _post(client: TestClient[Any, Any], path: str, form: dict[str, str]) -> Any:
    return await client.post(path, data=form, headers=AUTH, allow_redirects=False)


async def test_facts_are_listed_searched_edited_and_deleted(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        recall = app.deps.recall
        await recall.save("My landlord is Mrs Okafor", FactSource(), clock())
        await recall.save("The bakery opens at 7", FactSource(("web search results",)), clock())
        async with client_of(app) as client:
            listed = html.unescape(await page(client, "/memory"))
            found = html.unescape(await page(client, "/memory?q=bakery"))
            csrf = csrf_of(listed)
            refused = await _post(client, "/memory/m1/edit", {"text": "no csrf"})
            edited = await _post(
                client, "/memory/m1/edit", {"text": "My landlord is Mr Chen", "csrf": csrf}
            )
            deleted = await _post(client, "/memory/m2/delete", {"csrf": csrf})
            after = html.unescape(await page(client, "/memory"))
        facts = [hit.fact.text for hit in await recall.facts("landlord bakery")]
    assert 'id="fact-m1"' in listed and "My landlord is Mrs Okafor" in listed
    assert "outside text (web search results)" in listed and ">owner<" in listed
    assert 'id="fact-m2"' in found and 'id="fact-m1"' not in found
    assert refused.status == 403
    assert edited.status == 303 and deleted.status == 303
    assert "Deleted m2." in after and 'id="fact-m2"' not in after
    assert ">My landlord is Mr Chen</textarea>" in after
    assert facts == ["My landlord is Mr Chen"]  # what the model is shown next


async def test_a_consolidation_merges_marks_and_is_undone(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        recall = app.deps.recall
        for text in (
            "The owner likes green tea",
            "the owner likes green tea!",
            "Dentist appointment on 2026-11-20 at 09:00",
            "Dentist appointment on 2026-12-04 at 10:00",
        ):
            await recall.save(text, FactSource(), clock())
            clock.advance(minutes=1)
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/memory"))
            done = await _post(client, "/memory/consolidate", {"csrf": csrf})
            merged = html.unescape(await page(client, "/memory"))
            tea = [h.fact.id for h in await recall.facts("green tea")]
            note_dentist = [h.fact.id for h in await recall.facts("dentist", stale=False)]
            undone = await _post(client, "/memory/undo", {"csrf": csrf})
            back = html.unescape(await page(client, "/memory"))
            tea_back = sorted(h.fact.id for h in await recall.facts("green tea"))
    assert done.status == 303
    flash = merged.split('role="status">')[1].split("<")[0]
    assert flash == (
        "Consolidated 2 fact(s): m1 merged into m2 (duplicate); m3 its date 2026-11-20 has passed."
    )
    assert tea == ["m2"] and note_dentist == ["m4"]
    # The page reads the consolidation's log: when it ran, and what it did.
    assert "Undo the last consolidation (" in merged
    assert "<li>merged into m2 (duplicate)</li>" in merged.split("Last consolidation")[1]
    assert undone.status == 303 and "Undone: 2 fact(s) are as they were." in back
    assert tea_back == ["m1", "m2"]


async def test_a_fact_marked_always_true_rides_with_every_message(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with dash_app(app_db, tmp_path, clock, model) as app:
        await app.deps.recall.save("The owner's name is Ada Lovelace", FactSource(), clock())
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/memory"))
            await app.agent.respond("hi", owner_ctx(app.deps, owner_words="hi"))
            pinned = await _post(client, "/memory/m1/pin", {"csrf": csrf})
            await app.agent.respond("hi", owner_ctx(app.deps, owner_words="hi"))
    before, after = model.requests[-2:]
    assert pinned.status == 303
    assert "Ada Lovelace" not in before.messages[-1].note
    assert "Ada Lovelace" in after.messages[-1].note and "Ada" not in after.system
