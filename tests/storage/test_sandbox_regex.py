"""The regex rules of the ``db_query`` sandbox, as pure functions (no database).

Refused patterns come with the part that is wrong and, where possible, the rewrite;
accepted patterns are matched with Python's ``re`` (what the embedded server uses)
against inputs built to make them backtrack, and must stay fast.
"""

from __future__ import annotations

import re
import time

import pytest

from storage.sandbox_regex import check_pattern
from storage.sandbox_rules import SandboxError

ACCEPTED = [
    "^meeting", "dentist|doctor", r"(?i)^dr\.? smith", r"^\d{4}-\d{2}-\d{2}$", r"\bcall\b",
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$", r"(https?://)?example\.com", r"^\w+(\s\w+)*$",
    r"^(\d+,)*\d+$", r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$", r"([a-z0-9-]+\.)+[a-z]{2,}",
    r"(,\s?\w+)*", r"(\d{3}-)+", "colou?r", r"^(a|b)*$", ".*foo.*", r"\w+@", r"\d+\.?\d*",
    r"(?P<year>\d{4})", r"[\u00e9e]cole", r"^\+?\d[\d -]{6,}$", "(cat|dog)+", r"\x41+",
]  # fmt: skip

REFUSED = [
    (r"^(a+)+$", r"use ^a+$ instead of ^(a+)+$"),
    (r"^(\w+\s?)*$", r"use ^[\w\s]*$ instead of ^(\w+\s?)*$"),
    (r"(a?){2,9}", "repeats a group that has its own quantifier"),
    (r"(.*)*", r"use .* instead of (.*)*"),
    (r"(x\w+y)+", "repeats a group"),
    (r"(ab?b?c)+", "two quantifiers in a row"),
    (r"(a|aa)+", "alternatives can start with the same character"),
    (r"(\w|\d)*", r"use [\w\d]* instead of (\w|\d)*"),
    (r"(a|)+", "alternative 2 can match nothing"),
    (r"(cat|category)+", "alternatives can start with the same character"),
    (r"\w+\s?\w+@", "cubic time"),
    (r"\S+@\S+\.\S+", "cubic time"),
    (r"^\S+@\S+\.\S+$", r"[^@\s]+@[^@\s]+ instead of \S+@\S+"),
    (r".*\s*(11|b+)", "cubic time"),
    (r"\d+.(.+ +|x)", "cubic time"),
    (r"(a)\1", "backreference"),
    (r"(?P<n>a)(?P=n)", "backreferences, recursion"),
    (r"(?=a)b", "lookahead and lookbehind"),
    (r"(?<!a)b", "lookahead and lookbehind"),
    (r"(?(1)a|b)", "conditionals"),
    (r"(?<n>a)", r"(?P<name>...)"),
    (r"a(?i)b", "must come first"),
    (r"\p{L}+", r"\p is not supported"),
    (r"\Qa\E", r"\Q is not supported"),
    (r"[[:alpha:]]+", "POSIX classes"),
    (r"a{,3}", r"write {0,3} instead of {,3}"),
    (r"a{2000}", "over 1000"),
    ("a**", "nothing to repeat"),
    ("(a", "not closed"),
    ("[abc", "not closed"),
    ("x" * 201, "201 characters long; at most 200"),
]


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_common_patterns_are_accepted(pattern: str) -> None:
    check_pattern(pattern)


@pytest.mark.parametrize(("pattern", "advice"), REFUSED)
def test_unsafe_patterns_are_refused_with_advice(pattern: str, advice: str) -> None:
    with pytest.raises(SandboxError) as info:
        check_pattern(pattern)
    message = str(info.value)
    assert advice in message and len(message) < 600


def test_options_change_what_is_refused() -> None:
    with pytest.raises(SandboxError, match="option 'g'"):
        check_pattern("a", "g")
    with pytest.raises(SandboxError, match="exponential"):
        check_pattern("( a + ) +", "x")  # verbose: the spaces do not separate anything
    check_pattern("( a + ) +")  # literal spaces: each pass ends with one
    with pytest.raises(SandboxError, match="cubic"):
        check_pattern("A+a+$", "i")
    check_pattern("A+a+$")
    with pytest.raises(SandboxError, match="cubic"):
        check_pattern(r"^\S+@\S+$\n\S+@", "m")  # ^ anchors each line, not the value


ADVERSARIAL = ["a" * 28 + "!", "ab" * 14 + "!", " " * 28 + "!", "1," * 14 + "x", "aa " * 9 + "!"]


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_accepted_patterns_stay_fast_on_backtracking_bait(pattern: str) -> None:
    compiled = re.compile(pattern)
    started = time.perf_counter()
    for text in ADVERSARIAL:
        compiled.search(text * 40)
    assert time.perf_counter() - started < 0.5
