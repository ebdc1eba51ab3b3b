"""Keyword search without a model or a network: terms, and a BM25 index in memory.

SecantusDB has no text index (``$text``), and a multikey index of terms costs about
70 µs a posting there, so a common word in 50,000 messages takes hundreds of
milliseconds. The index is therefore kept in the process: postings as compact arrays
(a document number and its term count), about 5 bytes a posting plus one entry per
distinct term. BM25 (k1 1.2, b 0.75) ranks what a query's terms reach.

Terms: lower-cased words (any script), English function words left out, a light
stemming (plurals, ``-ing``, ``-ed``) applied alike to texts and queries, and a phone
number (seven digits or more, spaces and dashes between them) kept as one term of its
last eight digits, so "+44 20 7946 0000" is found by "020 7946 0000" and by itself.
"""

from __future__ import annotations

import heapq
import math
import re
from array import array
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
MAX_POSTINGS = 1_000
"""Documents scored per query term, the newest (see ``Bm25Index.search``)."""
COMMON = 0.25
"""A query term in more than this share of the documents is left out of the ranking
when the query has rarer ones: it would add a little to a quarter of everything, at
the cost of reading all its postings."""

_TOKEN = re.compile(r"\+?\d[\d \-.()/]{5,}\d|\w+")
_STOP_TEXT = """
a about above after again all also am an and any are as at be because been before
being below between both but by can could did do does doing done down during each else
ever few for from further had has have having he her here hers herself him himself his
how i if in into is it its itself just let me mine more most my myself no nor not now of
off on once only or other our ours out over own please remember same she should so some
such than that the their theirs them then there these they this those through to too
under until up us very was we were what whats when where which while who whom whose why
will with would you your yours yourself s t d ll m re ve don tell know
"""
STOPWORDS = frozenset(_STOP_TEXT.split())
"""Words that say nothing about which fact is meant (and "remember", "tell", "know",
which questions and requests about memory all carry)."""


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order, repeats kept."""
    found: list[str] = []
    for match in _TOKEN.finditer(text.casefold()):
        token = match.group()
        if token[0] in "+0123456789" and len(digits := re.sub(r"\D", "", token)) >= 7:
            found.append(digits[-8:])  # the same number, national or international
            continue
        for word in re.findall(r"\w+", token):
            if word not in STOPWORDS and word != "_":
                found.append(_stem(word))
    return found


@dataclass(frozen=True)
class Hit(Generic[K]):
    key: K
    score: float


class Bm25Index(Generic[K]):
    """Documents by key, their terms in postings; ``search`` ranks them by BM25.

    Removing a document marks its number dead (its postings are skipped); when the
    dead outnumber the living the postings are rebuilt, so memory stays bounded.
    """

    K1 = 1.2
    B = 0.75

    def __init__(self) -> None:
        self._keys: list[K | None] = []
        self._lengths = array("H")
        self._numbers: dict[K, int] = {}
        self._postings: dict[str, tuple[array[int], array[int]]] = {}
        self._total_length = 0
        self._dead = 0

    def __len__(self) -> int:
        return len(self._numbers)

    def __contains__(self, key: K) -> bool:
        return key in self._numbers

    def add(self, key: K, text: str) -> None:
        """Index ``text`` under ``key`` (replacing what ``key`` had)."""
        self.remove(key)
        counts = Counter(terms(text))
        number = len(self._keys)
        self._keys.append(key)
        length = min(sum(counts.values()), 65_535)
        self._lengths.append(length)
        self._total_length += length
        self._numbers[key] = number
        for term, count in counts.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = (array("I"), array("B"))
            postings[0].append(number)
            postings[1].append(min(count, 255))

    def frequency(self, term: str) -> int:
        """In how many documents ``term`` occurs (dead ones counted until compaction)."""
        postings = self._postings.get(term)
        return len(postings[0]) if postings is not None else 0

    def remove(self, key: K) -> None:
        number = self._numbers.pop(key, None)
        if number is None:
            return
        self._keys[number] = None
        self._total_length -= self._lengths[number]
        self._dead += 1
        if self._dead > 1_000 and self._dead > len(self._numbers):
            self._compact()

    def _compact(self) -> None:
        live = [(key, n) for n, key in enumerate(self._keys) if key is not None]
        renumber = {old: new for new, (_, old) in enumerate(live)}
        self._keys = [key for key, _ in live]
        self._lengths = array("H", (self._lengths[old] for _, old in live))
        self._numbers = {key: new for new, (key, _) in enumerate(live)}
        postings: dict[str, tuple[array[int], array[int]]] = {}
        for term, (numbers, counts) in self._postings.items():
            kept = [(renumber[n], c) for n, c in zip(numbers, counts, strict=True) if n in renumber]
            if kept:
                postings[term] = (
                    array("I", (n for n, _ in kept)),
                    array("B", (c for _, c in kept)),
                )
        self._postings = postings
        self._dead = 0

    def search(self, query: str | Iterable[str], limit: int = 10) -> list[Hit[K]]:
        """The best ``limit`` documents for ``query`` (a text, or its terms), best first;
        only documents sharing a term with it. A term's newest ``MAX_POSTINGS`` documents
        are scored (a word in tens of thousands of messages would cost milliseconds for
        next to nothing); its weight (idf) counts them all."""
        wanted = set(terms(query) if isinstance(query, str) else query)
        living = len(self._numbers)
        if not wanted or not living:
            return []
        average = max(self._total_length / living, 1.0)
        scores: dict[int, float] = {}
        k1, b = self.K1, self.B
        keys, lengths = self._keys, self._lengths
        present = [t for t in wanted if t in self._postings]
        rare = [t for t in present if len(self._postings[t][0]) <= living * COMMON]
        for term in rare or present:  # a word in most documents ranks next to nothing
            numbers, counts = self._postings[term]
            df = len(numbers)
            if self._dead:
                df = sum(1 for n in numbers if keys[n] is not None)
            idf = math.log(1 + (living - df + 0.5) / (df + 0.5))
            top = idf * (k1 + 1)
            slope, base = k1 * b / average, k1 * (1 - b)
            start = max(0, len(numbers) - MAX_POSTINGS)
            get = scores.get
            for number, count in zip(numbers[start:], counts[start:], strict=True):
                if keys[number] is None:
                    continue
                scores[number] = get(number, 0.0) + top * count / (
                    count + base + slope * lengths[number]
                )
        best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))
        return [Hit(key, score) for number, score in best if (key := keys[number]) is not None]
