"""Memory that remembers, measured (issue 38, item 7). Prints its figures.

Quality: 200 facts planted over 30 simulated days of conversation with the owner (one
chat, the real agent, tools and database; a scripted model that does what a model
would: ``save_memory`` for "remember", ``replaces`` with the id the note shows for a
correction, ``forget_memory`` with ``history`` for "forget", ``search_memory`` for a
question), with 40 corrections, 20 forgets and everyday chatter mixed in. Then 200
questions, each needing one fact: is the fact in the request (the note after the
question) or in the first ``search_memory`` answer? Every request after a correction
or a forget is read whole (system prompt, history, note, tool results) for the old
fact's identifying value. The "hi" request is counted with 200 facts stored.

Speed: 10,000 facts and 50,000 messages stored, then ``search_memory`` called through
the tool 200 times (the first call, which loads the index, reported apart).

The facts are made from templates (people, what about them, a value), so the questions
share their words with the facts: this measures the machinery (ranking, note, ids,
corrections, forgetting), not how a real model words its searches.

Run: python bench/bench_memory.py [--facts 10000 --messages 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import resource
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.context import AgentDeps  # noqa: E402
from agent.conversation.agent import Agent  # noqa: E402
from agent.llm.types import ModelMessage, ToolResultPart  # noqa: E402
from agent.tools.catalog import core_catalog  # noqa: E402
from agent.tools.memory import SEARCH_MEMORY  # noqa: E402
from storage.db import open_database  # noqa: E402
from tests.conftest import make_settings  # noqa: E402
from tests.contexts import agent_deps, owner_ctx  # noqa: E402
from tests.fakes.scripted import Request, ScriptedModel  # noqa: E402
from tests.tokens import count_tokens  # noqa: E402

START = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


def words(text: str) -> list[str]:
    return text.split()


NAMES = words(
    "Anna Bruno Chiara Dmitri Elena Farid Greta Hamid Ingrid Jonas Keiko Lars Marta Nadia "
    "Oskar Priya Quentin Rosa Stefan Tomasz Ulla Viktor Wanda Xavier Yusuf Zofia Amara "
    "Bastian Carmen Dario Esther Felix Gloria Henrik Irene Jakob Kamala Leon Mirela Nils "
    "Olga Pavel Rania Sven Tilda Umar Vera Willem Yara Zeno"
)
CITIES = words(
    "Aberdeen Bologna Cardiff Dresden Eindhoven Florence Granada Hamburg Innsbruck Jena "
    "Krakow Lisbon Malaga Nantes Oslo Porto Quimper Rennes Seville Turin Utrecht Valencia "
    "Wroclaw Zagreb Antwerp Bergen Cork Dijon Essen Faro"
)
PLACES = words(
    "Bellavista Corvo Dumpling Falafel Ginkgo Harbour Indigo Juniper Kettle Lantern "
    "Marigold Nomad Olive Pepper Quince Rosemary Saffron Tamarind Umami Vesuvio"
)
CHATTER = (
    "good morning",
    "the weather is grey again",
    "I had a long meeting today",
    "thanks, that helps",
    "I'm going for a run",
    "what a day",
    "ok",
    "lunch was nice",
)


@dataclass
class Fact:
    person: str
    about: str
    value: str

    @property
    def text(self) -> str:
        return f"{self.person}'s {self.about} is {self.value}"

    @property
    def question(self) -> str:
        return f"What is {self.person}'s {self.about}?"

    @property
    def mark(self) -> str:
        """The value's identifying part (what must never come back once gone)."""
        return self.value


def value_for(about: str, rng: random.Random, used: set[str]) -> str:
    while True:
        if about == "phone number":
            value = f"+44 20 7946 {rng.randrange(1000, 9999)}"
        elif about == "home city":
            value = rng.choice(CITIES) + "-" + rng.choice(("Nord", "Sud", "Ost", "West", "Mitte"))
        elif about == "favourite restaurant":
            value = f"{rng.choice(PLACES)} {rng.choice(PLACES)} Kitchen"
        else:
            value = f"{rng.randrange(1000, 9999)}"
        if value not in used:
            used.add(value)
            return value


ABOUT = ("phone number", "home city", "favourite restaurant", "locker code")


def plant(rng: random.Random) -> list[Fact]:
    used: set[str] = set()
    return [Fact(p, a, value_for(a, rng, used)) for p in NAMES for a in ABOUT][:200]


_NOTE_ID = re.compile(r"^- (m\d+) \([^)]*\): (.*)$", re.MULTILINE)


class Owner:
    """The scripted model: acts on the owner's words as a model would, and records
    what each request carried."""

    def __init__(self) -> None:
        self.model = ScriptedModel(self.respond)
        self.carried: list[str] = []
        self.answers: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def respond(self, request: Request) -> ModelMessage | str:
        self.model.requests.clear()
        self.last = request
        self.carried.append(_everything(request))
        last = request.messages[-1]
        call = self.model.call
        if last.role == "tool":
            part = last.parts[0]
            if isinstance(part, ToolResultPart):
                self.answers.append(part.result)
                if part.name == "search_memory" and self.pending is not None:
                    return self._act_on(self.pending, part.result)
            return "Done."
        words, note = last.text, last.note
        self.notes.append(note)
        self.pending = None
        if words.startswith("remember: "):
            return call("save_memory", memory=words.removeprefix("remember: "))
        if words.startswith(("correction: ", "forget ")):
            subject = words.split(": ", 1)[-1].split(" is now ")[0].removeprefix("forget ")
            found = _in_note(note, subject)
            self.pending = words
            if found is None:
                return call("search_memory", query=subject)
            return self._act(words, found)
        if words.endswith("?"):
            return call("search_memory", query=words)
        return "Noted."

    pending: str | None = None
    last: Request

    def _act_on(self, words: str, result: dict[str, Any]) -> ModelMessage | str:
        self.pending = None
        subject = words.split(": ", 1)[-1].split(" is now ")[0].removeprefix("forget ")
        for fact in result.get("facts", []):
            if str(fact["text"]).startswith(subject):
                return self._act(words, str(fact["id"]))
        return "I could not find it."

    def _act(self, words: str, fact_id: str) -> ModelMessage:
        if words.startswith("correction: "):
            new = words.removeprefix("correction: ").replace(" is now ", " is ")
            return self.model.call("save_memory", memory=new, replaces=fact_id)
        return self.model.call("forget_memory", ids=fact_id, history=True)


def _in_note(note: str, subject: str) -> str | None:
    for fact_id, text in _NOTE_ID.findall(note):
        if text.startswith(subject):
            return str(fact_id)
    return None


def _everything(request: Request) -> str:
    texts = [request.system]
    for message in request.messages:
        texts += [json.dumps(p.model_dump(), ensure_ascii=False) for p in message.parts]
    return "\n".join(texts)


async def quality(deps: AgentDeps, rng: random.Random) -> dict[str, Any]:
    facts = plant(rng)
    corrected = rng.sample(facts, 40)
    forgotten = rng.sample([f for f in facts if f not in corrected], 20)
    used = {f.value for f in facts}
    script: list[tuple[int, str, Fact | None, str]] = []  # (day, words, fact, kind)
    for i, fact in enumerate(facts):
        script.append((i * 30 // 200, f"remember: {fact.text}", fact, "plant"))
    for fact in corrected:
        day = rng.randrange(fact_day(facts, fact) + 1, 31)
        script.append((day, "", fact, "correct"))
    for fact in forgotten:
        day = rng.randrange(fact_day(facts, fact) + 1, 31)
        script.append((day, f"forget {fact.person}'s {fact.about}", fact, "forget"))
    for day in range(30):
        for _ in range(5):
            script.append((day, rng.choice(CHATTER), None, "chatter"))
    script.sort(key=lambda item: item[0])
    owner = Owner()
    agent = Agent(owner.model, core_catalog())
    gone: list[tuple[int, str]] = []  # (request index from which it must not appear, mark)
    current = {id(f): f for f in facts}
    for day, words, fact, kind in script:
        clock_to(deps, START + timedelta(days=day, minutes=len(owner.carried)))
        if kind == "correct" and fact is not None:
            new = Fact(fact.person, fact.about, value_for(fact.about, rng, used))
            words = f"correction: {new.person}'s {new.about} is now {new.value}"
            await agent.respond(words, owner_ctx(deps, owner_words=words))
            gone.append((len(owner.carried), fact.mark))
            current[id(fact)] = new
            continue
        await agent.respond(words, owner_ctx(deps, owner_words=words))
        if kind == "forget" and fact is not None:
            gone.append((len(owner.carried), fact.mark))
            del current[id(fact)]
    asked = 0
    found = 0
    for fact in list(current.values()):
        question = fact.question
        before = len(owner.notes)
        owner.answers.clear()
        await agent.respond(question, owner_ctx(deps, owner_words=question))
        note = owner.notes[before]
        first = owner.answers[0] if owner.answers else {}
        in_search = any(fact.text in str(f.get("text")) for f in first.get("facts", []))
        asked += 1
        found += fact.text in note or in_search
    for fact in rng.sample(list(current.values()), 200 - asked):
        question = fact.question  # more questions on the facts left, up to 200
        before = len(owner.notes)
        owner.answers.clear()
        await agent.respond(question, owner_ctx(deps, owner_words=question))
        first = owner.answers[0] if owner.answers else {}
        in_search = any(fact.text in str(f.get("text")) for f in first.get("facts", []))
        asked += 1
        found += fact.text in owner.notes[before] or in_search
    leaks = sum(1 for start, mark in gone for carried in owner.carried[start:] if mark in carried)
    leaking_requests = sum(
        1
        for i, carried in enumerate(owner.carried)
        if any(i >= s and m in carried for s, m in gone)
    )
    await agent.respond("hi", owner_ctx(deps, owner_words="hi", conversation_key="console:hi"))
    hi = owner.last
    schemas = json.dumps([t.model_dump() for t in hi.tools])
    hi_tokens = count_tokens(hi.system) + count_tokens(schemas)
    hi_tokens += sum(count_tokens(m.text) + count_tokens(m.note) for m in hi.messages)
    return {
        "questions": asked,
        "found": found,
        "requests": len(owner.carried),
        "gone": len(gone),
        "leaks": leaks,
        "leaking_requests": leaking_requests,
        "hi_tokens": hi_tokens,
    }


def fact_day(facts: list[Fact], fact: Fact) -> int:
    return facts.index(fact) * 30 // 200


def clock_to(deps: AgentDeps, at: datetime) -> None:
    CLOCK[0] = at  # the deps' clock reads it


CLOCK = [START]


async def speed(deps: AgentDeps, facts: int, messages: int, rng: random.Random) -> dict[str, Any]:
    db = deps.db
    now = datetime.now(UTC)
    docs = []
    for i in range(facts):
        person, about = rng.choice(NAMES) + str(i % 97), rng.choice(ABOUT)
        docs.append(
            {
                "_id": f"m{100_000 + i}",
                "text": f"{person}'s {about} is {rng.randrange(10**6)}",
                "source": {"kind": "owner"},
                "status": "active",
                "created_at": now,
                "updated_at": now,
            }
        )
        if len(docs) == 2_000:
            await db["memories"].insert_many(docs)
            docs = []
    if docs:
        await db["memories"].insert_many(docs)
    await db["settings"].update_one(
        {"_id": "memory_counter"}, {"$inc": {"version": 1}}, upsert=True
    )
    conversation = (
        await db["conversations"].insert_one({"key": "telegram:42", "channel": "telegram"})
    ).inserted_id
    words = [w for line in CHATTER for w in line.split()] + NAMES + CITIES + PLACES
    batch = []
    for i in range(messages):
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 30)))
        batch.append(
            {
                "conversation_id": conversation,
                "seq": i,
                "role": "user" if i % 2 == 0 else "assistant",
                "parts": [{"kind": "text", "text": text}],
                "created_at": now,
            }
        )
        if len(batch) == 2_000:
            await db["messages"].insert_many(batch)
            batch = []
    if batch:
        await db["messages"].insert_many(batch)
    rss_before = rss_mib()
    ctx = owner_ctx(deps)
    started = time.perf_counter()
    await SEARCH_MEMORY.invoke({"query": "Anna phone number"}, ctx)
    first = time.perf_counter() - started
    rss_after = rss_mib()
    times = []
    for _ in range(200):
        query = f"{rng.choice(NAMES)} {rng.choice(ABOUT)} {rng.choice(CITIES)}"
        started = time.perf_counter()
        result = await SEARCH_MEMORY.invoke({"query": query}, ctx)
        times.append(time.perf_counter() - started)
        assert "error" not in result, result
    times.sort()
    return {
        "first_ms": first * 1000,
        "p50_ms": statistics.median(times) * 1000,
        "p95_ms": times[int(len(times) * 0.95) - 1] * 1000,
        "index_rss_mib": rss_after - rss_before,
    }


def rss_mib() -> float:
    """This process's resident memory now (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(38)
    settings = make_settings(data_dir=Path(tempfile.mkdtemp()), openai_api_key="k")
    async with (
        open_database(None, f"mem_{uuid.uuid4().hex[:6]}", settings.data_dir) as database,
        aiohttp.ClientSession() as http,
    ):
        deps = agent_deps(settings, database.db, http, clock=lambda: CLOCK[0])
        started = time.perf_counter()
        q = await quality(deps, rng)
        print(
            f"quality: {q['found']}/{q['questions']} questions found the fact in the note or "
            f"the first search_memory answer ({q['found'] / q['questions']:.1%}); "
            f"{q['requests']} requests, {q['gone']} facts corrected or forgotten, "
            f"old value seen {q['leaks']} times in {q['leaking_requests']} requests after; "
            f"'hi' request {q['hi_tokens']} tokens (core tools only) with 200 facts "
            f"stored; {time.perf_counter() - started:.0f} s"
        )
    async with (
        open_database(None, f"mem_{uuid.uuid4().hex[:6]}", settings.data_dir) as database,
        aiohttp.ClientSession() as http,
    ):
        deps = agent_deps(settings, database.db, http)
        s = await speed(deps, args.facts, args.messages, rng)
        print(
            f"speed: {args.facts} facts, {args.messages} messages: search_memory p50 "
            f"{s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms; first call (loads the index) "
            f"{s['first_ms']:.0f} ms, RSS +{s['index_rss_mib']:.1f} MiB after loading it"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=50_000)
    asyncio.run(main(parser.parse_args()))
