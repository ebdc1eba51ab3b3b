"""The one retry policy: waits that grow to a cap, a random share, a retry budget."""

from __future__ import annotations

from random import Random

import pytest

from runtime.backoff import Backoff, Pauses


def never() -> float:
    raise AssertionError("a policy without jitter drew a random number")


def test_waits_grow_by_the_factor_up_to_the_cap() -> None:
    doubling = Backoff(first=1.0, cap=30.0)
    assert [doubling.delay(n, never) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    fourfold = Backoff(first=1.0, cap=300.0, factor=4.0)
    assert [fourfold.delay(n, never) for n in range(1, 7)] == [1, 4, 16, 64, 256, 300]
    steady = Backoff(first=0.5, cap=0.5, factor=1.0)
    assert {steady.delay(n, never) for n in range(1, 5)} == {0.5}


def test_a_loop_that_never_gives_up_stays_at_the_cap() -> None:
    forever = Backoff(first=1.0, cap=300.0)
    assert forever.delay(5_000, never) == 300.0  # 2 ** 4999 overflows a float
    assert forever.allows(5_000)


def test_jitter_takes_its_share_of_each_wait_from_the_draw() -> None:
    policy = Backoff(first=0.5, cap=8.0, jitter=0.5)
    draws, replay = Random(29), Random(29)
    for n in range(1, 9):
        full = min(8.0, 0.5 * 2 ** (n - 1))
        wait = policy.delay(n, draws.random)
        assert full / 2 <= wait <= full
        assert wait == pytest.approx(full / 2 + replay.random() * full / 2)
    assert policy.delay(3, lambda: 1.0) == 2.0
    assert policy.delay(3, lambda: 0.0) == 1.0


def test_a_wait_the_service_asked_for_wins_when_longer() -> None:
    policy = Backoff(first=1.0, cap=300.0, factor=4.0)
    assert policy.wait(2, asked=None) == 4.0
    assert policy.wait(2, asked=1.5) == 4.0
    assert policy.wait(2, asked=42.0) == 42.0


def test_retries_bound_the_attempts_a_loop_makes() -> None:
    policy = Backoff(first=30.0, cap=240.0, retries=4)
    assert [policy.allows(n) for n in range(1, 6)] == [True, True, True, True, False]
    assert not Backoff(first=1.0, cap=1.0, retries=0).allows(1)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"first": 0.0, "cap": 1.0}, "0 < first <= cap"),
        ({"first": 5.0, "cap": 1.0}, "0 < first <= cap"),
        ({"first": 1.0, "cap": 2.0, "factor": 0.5}, "factor must be at least 1"),
        ({"first": 1.0, "cap": 2.0, "jitter": 1.5}, "jitter must be between 0 and 1"),
        ({"first": 1.0, "cap": 2.0, "retries": -1}, "retries must not be negative"),
    ],
)
def test_bad_numbers_are_refused_when_the_policy_is_built(
    fields: dict[str, float], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        Backoff(**fields)  # type: ignore[arg-type]


def test_retries_count_from_one() -> None:
    with pytest.raises(ValueError, match="count from 1"):
        Backoff(first=1.0, cap=2.0).delay(0)


async def test_a_loop_sleeps_longer_after_each_failure_and_starts_over_after_a_success() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    pauses = Pauses(Backoff(first=1.0, cap=4.0, retries=3), sleep=sleep)
    for _ in range(3):
        await pauses.sleep()
    assert (slept, pauses.failures, pauses.exhausted) == ([1.0, 2.0, 4.0], 3, True)
    pauses.reset()
    assert (pauses.failures, pauses.upcoming, pauses.exhausted) == (0, 1.0, False)
    assert await pauses.sleep(asked=30.0) == 30.0  # the service's Retry-After wins
    assert slept[-1] == 30.0 and pauses.upcoming == 2.0
