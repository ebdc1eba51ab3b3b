"""The regex rules of the ``db_query`` sandbox, as pure functions (no database).

Refused patterns come with the part that is wrong and, where possible, the rewrite;
accepted patterns are matched with Python's ``re`` (what the embedded server uses)
against inputs built to make them backtrack, and must stay linear: a quadratic pattern
on a 60,000-character value froze the embedded database for 35 s (issue 28).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from storage.sandbox.regex import check_pattern
from storage.sandbox.rules import SandboxError

ACCEPTED = [
    "^meeting", "dentist|doctor", r"(?i)^dr\.? smith", r"^\d{4}-\d{2}-\d{2}$", r"\bcall\b",
    r"^[^@\s]+@[^@\s.]+\.[^@\s]+$", r"(https?://)?example\.com", r"^\w+(\s\w+)*$",
    r"^(\d+,)*\d+$", r"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$", r"^([a-z0-9-]+\.)+[a-z]{2,}$",
    r"(,\s?\w+)*", r"(\d{3}-)+", "colou?r", r"^(a|b)*$", "foo.*", r"\w@", r"\d+\.?\d*",
    r"(?P<year>\d{4})", r"[\u00e9e]cole", r"^\+?\d[\d -]{6,}$", "(cat|dog)+", r"\x41+",
    r"@[a-z]+\.", r"foo\s+bar", r"\w \w+", r"^.*foo", r"[a-z][0-9]", r"https?://[^/\s]+",
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
    (r"[a-z]+[0-9]", "use [a-z][0-9] instead of [a-z]+[0-9]: it finds the same values"),
    (r".*foo.*", "use foo.* instead of .*foo.*"),
    (r"\w+@", r"use \w@ instead of \w+@"),
    (r"(?i)[a-z]+$", "use (?i)[a-z]$ instead"),
    (r"a.*b", "quadratic time"),
    (r"x[a-z]+[0-9]", "start the pattern with ^"),
    (r"([a-z0-9-]+\.)+[a-z]{2,}", "quadratic time"),
    (r"^[^@\s]+@[^@\s]+\.[^@\s]+$", r"use ^[^@\s]+@[^@\s.]+\.[^@\s]+$ instead"),
    (r"^\d+\d+x", "quadratic time"),
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
    check_pattern("^A+a+$")
    check_pattern("^.*x")
    with pytest.raises(SandboxError, match="quadratic"):
        check_pattern("^.*x", "m")  # ^ anchors each line, not the value


ADVERSARIAL = ["a" * 28 + "!", "ab" * 14 + "!", " " * 28 + "!", "1," * 14 + "x", "aa " * 9 + "!",
               "a@" + "a." * 14 + " ", "foo" * 10 + "\t" * 10]  # fmt: skip
LONG = 256_000
"""The length of the issue's value: a quadratic pattern takes hours on it."""
WATCHDOG = 120.0
"""A linear pattern is done with every bait in well under a second; a quadratic one on
the first bait would need hours, so any generous limit tells them apart."""
MATCH_ALL = """
import json, re, sys
patterns, length, texts = json.load(sys.stdin)
baits = [(text * (length // len(text) + 1))[:length] for text in texts]
for pattern in patterns:
    compiled = re.compile(pattern)
    for bait in baits:
        compiled.search(bait)
print(len(patterns) * len(baits), flush=True)
"""


def _match_all(patterns: list[str], texts: list[str], timeout: float) -> str:
    """Search every bait (each text repeated to ``LONG`` characters) with every pattern, in
    a process of its own that the watchdog can end: one ``re`` match cannot be interrupted."""
    done = subprocess.run(
        [sys.executable, "-c", MATCH_ALL], input=json.dumps([patterns, LONG, texts]),
        capture_output=True, text=True, timeout=timeout, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_accepted_patterns_stay_linear_on_long_backtracking_bait() -> None:
    assert _match_all(ACCEPTED, ADVERSARIAL, WATCHDOG) == str(len(ACCEPTED) * len(ADVERSARIAL))
