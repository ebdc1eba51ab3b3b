"""freeze_heap: start-up's garbage is collected, what is alive is out of later collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from runtime.heap import YOUNG_THRESHOLD, freeze_heap, tune_collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    # No automatic collection meanwhile: one running in another thread (the session's
    # leftover threads allocate too) makes ours return at once, collecting nothing.
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()  # the rest of the test session collects as before


def test_garbage_is_collected_and_the_living_are_frozen(unfrozen: None) -> None:
    dead_a, dead_b = Node(), Node()
    dead_a.other, dead_b.other = dead_b, dead_a  # a cycle only the collector frees
    gone = weakref.ref(dead_a)
    del dead_a, dead_b
    alive = Node()
    alive.other = alive

    frozen = freeze_heap()

    assert gone() is None
    # Frozen objects still die by reference count (other threads drop theirs), so
    # the count can only fall after freeze_heap returned it.
    assert 0 < gc.get_freeze_count() <= frozen
    # A full collection no longer looks at what was alive when the heap was frozen.
    assert not any(o is alive for o in gc.get_objects())
    assert all(o is not alive for o in gc.get_objects(generation=2))


def test_what_is_made_later_is_still_collected(unfrozen: None) -> None:
    freeze_heap()
    late_a, late_b = Node(), Node()
    late_a.other, late_b.other = late_b, late_a
    gone = weakref.ref(late_a)
    del late_a, late_b
    gc.collect()
    assert gone() is None


@pytest.fixture
def thresholds_kept() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)  # the rest of the test session collects as before


def test_the_young_are_collected_less_often_and_cycles_still_die(thresholds_kept: None) -> None:
    gc.set_threshold(700, 10, 10)  # CPython's default
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    dead_a, dead_b = Node(), Node()
    dead_a.other, dead_b.other = dead_b, dead_a
    gone = weakref.ref(dead_a)
    del dead_a, dead_b
    kept = []
    for _ in range(2 * YOUNG_THRESHOLD):  # no explicit collection: the collector's own
        kept.append(Node())
        if gone() is None:
            break
    assert gone() is None
