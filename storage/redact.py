"""Forgetting in history: the sentences that carry a forgotten fact, taken out.

``forget_memory`` with ``history`` asks for more than deleting facts: the owner's past
messages and the agent's answers that carry them must not reach the model again. A
``Carrier`` says which sentences carry them: one holding a term of the owner's query,
two terms of a forgotten fact, or one of its identifying words (a name written with a
capital inside the fact, a number of four digits or more, a phone number). Each such
sentence becomes ``REDACTED``; the rest of the text stays. Swept: ``messages`` (text,
tool calls and their results), the stored ``runs`` (their instructions and results),
``inbox`` and ``outbox`` (what was received and sent, which ``db_query`` can read),
and the running summaries of ``conversations``.
A correction (``save_memory`` with ``replaces``) sweeps the same way for the words of
the old fact the new one changed (``Carrier.correcting``), so the old value does not
come back from history either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.text_search import terms

Doc = dict[str, Any]
REDACTED = "[forgotten at the owner's request]"
KEPT_KEYS = frozenset(
    {"_id", "kind", "id", "call_id", "name", "role", "status", "mime", "provider_data"}
)
"""Keys whose values are ours (names, ids), never the owner's words."""
TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "sir", "i", "the", "my"})
_WORD = re.compile(r"\+?\d[\d \-.()/]{5,}\d|\w+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*\s*|\n")


@dataclass(frozen=True)
class Carrier:
    """What makes a sentence carry something to forget (module docstring)."""

    query: frozenset[str]
    facts: tuple[frozenset[str], ...]
    strong: frozenset[str]
    marker: str = REDACTED
    """What a carrying sentence becomes."""

    @classmethod
    def of(cls, query: str, facts: Iterable[str]) -> Carrier:
        texts = list(facts)
        strong: set[str] = set()
        for text in texts:
            for match in _WORD.finditer(text):
                word = match.group()
                before = text[: match.start()].rstrip()
                if word[0].isdigit() or word[0] == "+":
                    strong.update(t for t in terms(word) if len(t) >= 4)
                elif (
                    word[0].isupper()
                    and before
                    and before[-1] not in ".!?:"
                    and (word.casefold() not in TITLES)
                ):
                    strong.update(terms(word))
        return cls(
            frozenset(terms(query)), tuple(frozenset(terms(t)) for t in texts), frozenset(strong)
        )

    @classmethod
    def correcting(cls, old: str, new: str, marker: str) -> Carrier:
        """What a correction takes out of history: the sentences holding an identifying
        word of the ``old`` fact that the ``new`` one no longer has (Okafor, once the
        landlord is Mr Chen); nothing when the correction changed no such word."""
        gone = cls.of("", [old]).strong - cls.of("", [new]).strong
        return cls(frozenset(), (), frozenset(gone), marker)

    @property
    def empty(self) -> bool:
        return not (self.query or self.strong or any(self.facts))

    def words(self) -> set[str]:
        """Every term that can make a sentence carry (for finding candidates)."""
        return set(self.query) | set(self.strong) | {t for f in self.facts for t in f}

    def carries(self, sentence: str) -> bool:
        found = set(terms(sentence))
        if not found:
            return False
        if found & self.query or found & self.strong:
            return True
        return any(len(found & fact) >= min(2, len(fact)) for fact in self.facts if fact)

    def redact(self, text: str) -> str:
        """``text`` with each sentence that carries replaced (``REDACTED`` once for a run
        of them); ``text`` itself when none does."""
        if not text or not self.carries(text):
            return text
        out: list[str] = []
        for sentence in _SENTENCE.findall(text):
            if sentence.strip() and self.carries(sentence):
                if not out or out[-1].strip() != self.marker:
                    out.append(self.marker + (" " if sentence.endswith(" ") else ""))
                continue
            out.append(sentence)
        return "".join(out).strip() or self.marker

    def value(self, value: Any, key: str = "") -> Any:
        """``value`` with every string in it redacted (ids and names left alone)."""
        if key in KEPT_KEYS:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


SWEPT_FIELD = "sweeps"
"""On each conversation: how many redaction sweeps have run since it began."""


@dataclass
class Swept:
    """How many stored documents a sweep changed, by collection."""

    messages: list[Doc]
    counts: dict[str, int]


async def sweep(db: AsyncDatabase[Doc], carrier: Carrier) -> Swept:
    """Redact what ``carrier`` carries in every place the model can read again."""
    counts: dict[str, int] = {}
    changed_messages: list[Doc] = []
    for name, fields in (
        (c.MESSAGES, ("parts",)),
        (c.RUNS, ("result", "error", "instruction", "steps", "name")),
        (c.INBOX, ("text",)),
        (c.OUTBOX, ("text",)),
        (c.CONVERSATIONS, ("summary",)),
    ):
        projection = {f: 1 for f in fields} | (
            {"role": 1, "conversation_id": 1} if name == c.MESSAGES else {}
        )
        changed = 0
        async for doc in db[name].find({}, projection):
            change = {
                f: carrier.value(doc[f], f if f != "parts" else "") for f in fields if f in doc
            }
            change = {f: v for f, v in change.items() if v != doc[f]}
            if not change:
                continue
            await db[name].update_one({"_id": doc["_id"]}, {"$set": change})
            changed += 1
            if name == c.MESSAGES:
                changed_messages.append({**doc, **change})
        counts[name] = changed
    # A summary being written from what was read before this sweep would bring the
    # words back: each conversation's count moves on, and such a summary is not stored
    # (``ConversationRepo.save_summary``).
    await db[c.CONVERSATIONS].update_many({}, {"$inc": {SWEPT_FIELD: 1}})
    return Swept(changed_messages, counts)
