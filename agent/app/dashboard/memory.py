"""Memory: ``GET /memory`` lists the saved facts (source, date, state) and searches
them (``?q=``); ``POST /memory/<id>/edit`` (form field ``text``) and ``/delete`` change
one; ``POST /memory/consolidate`` merges duplicates and marks past-dated facts now,
``/memory/undo`` puts back what the last consolidation changed; ``/memory/<id>/pin``
marks a fact always true (it rides in the note of every message, not only when it
bears on one).

Every change goes through ``storage.recall`` like the memory tools, so the next
request sees it; an edit keeps the earlier text in the fact's history (never shown to
the model).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.app.dashboard.context import Dashboard, human_time
from storage.consolidate import consolidate, last_log, undo
from storage.repos.memories import Fact, FactTooLong

LISTED = 500


def fact_row(fact: Fact, dash: Dashboard) -> dict[str, Any]:
    return {
        "id": fact.id,
        "text": fact.text,
        "source": fact.source.words(),
        "outside": fact.source.is_outside,
        "saved": human_time(fact.created_at, dash.tz, dash.now()),
        "state": fact.status,
        "note": fact.note,
        "edited": len(fact.history),
        "pinned": fact.pinned,
    }


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    def recall() -> Any:
        return dash.app.deps.recall

    async def memory_page(request: web.Request) -> web.StreamResponse:
        query = request.query.get("q", "").strip()[:200]
        if query:
            facts = [hit.fact for hit in await recall().facts(query, limit=LISTED)]
        else:
            facts = list(reversed(await recall().active_facts()))[:LISTED]
        log = await last_log(dash.app.deps.db)
        context = {
            "query": query,
            "facts": [fact_row(f, dash) for f in facts],
            "consolidated": human_time(log.at, dash.tz, dash.now()) if log else None,
            "consolidated_notes": list(log.notes) if log else [],
        }
        return dash.render(request, "memory.html", context)

    async def edit(request: web.Request) -> web.StreamResponse:
        fact_id = request.match_info["fact_id"]
        form = await request.post()
        text = str(form.get("text") or "")
        try:
            fact = await recall().update(fact_id, {"text": text}, dash.now())
        except FactTooLong as exc:
            return dash.done(request, "/memory", f"Nothing changed: {exc}")
        if fact is None:
            return dash.done(request, "/memory", f"No fact {fact_id}; nothing changed.")
        return dash.done(request, "/memory", f"Saved {fact.id}: “{fact.text}”.")

    async def delete(request: web.Request) -> web.StreamResponse:
        fact_id = request.match_info["fact_id"]
        fact = await recall().fact(fact_id) or next(iter(await recall().store.get([fact_id])), None)
        if fact is None:
            return dash.done(request, "/memory", f"No fact {fact_id}; nothing changed.")
        gone = await recall().delete([fact])
        return dash.done(request, "/memory", f"Deleted {', '.join(f.id for f in gone)}.")

    async def consolidate_now(request: web.Request) -> web.StreamResponse:
        changes = await consolidate(dash.app.deps.db, dash.now(), dash.tz)
        await recall().reload_facts()
        if not changes:
            return dash.done(request, "/memory", "Nothing to consolidate.")
        said = "; ".join(f"{ch.fact.id} {ch.note}" for ch in changes[:10])
        return dash.done(request, "/memory", f"Consolidated {len(changes)} fact(s): {said}.")

    async def undo_last(request: web.Request) -> web.StreamResponse:
        count = await undo(dash.app.deps.db)
        await recall().reload_facts()
        if not count:
            return dash.done(request, "/memory", "No consolidation to undo.")
        return dash.done(request, "/memory", f"Undone: {count} fact(s) are as they were.")

    async def pin(request: web.Request) -> web.StreamResponse:
        fact_id = request.match_info["fact_id"]
        fact = await recall().fact(fact_id)
        if fact is None:
            return dash.done(request, "/memory", f"No fact {fact_id}; nothing changed.")
        await recall().update(fact_id, {"pinned": not fact.pinned}, dash.now())
        said = (
            "rides with every message now" if not fact.pinned else "rides only when it bears on one"
        )
        return dash.done(request, "/memory", f"{fact_id} {said}.")

    dash.get(router, "/memory", memory_page)
    dash.post(router, "/memory/{fact_id}/pin", pin)
    dash.post(router, "/memory/consolidate", consolidate_now)
    dash.post(router, "/memory/undo", undo_last)
    dash.post(router, "/memory/{fact_id}/edit", edit)
    dash.post(router, "/memory/{fact_id}/delete", delete)
