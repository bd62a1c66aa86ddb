"""rate_limit(): admission within the rate, bursts, turns for blocked callers in arrival
order, retry_after, bad input, and what is stored (sync and async through ``driver``)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis

from django_redis_lock import RateLimited, rate_limit


def test_a_spaced_rate_admits_one_call_then_refuses_until_the_interval_passed() -> None:
    limit = rate_limit("api", "10/s")
    assert limit.acquire(blocking=False)
    assert not limit.acquire(blocking=False)
    wait = limit.retry_after()
    assert 0.05 < wait <= 0.1
    turn = limit.reserve(0.0)
    assert not turn.admitted
    assert 0.05 < turn.retry_after <= 0.1


def test_a_burst_lets_that_many_more_through_at_once() -> None:
    limit = rate_limit("burst", "1/m", burst=4)
    admitted = [limit.acquire(blocking=False) for _ in range(7)]
    assert admitted == [True] * 5 + [False] * 2
    assert 59 < limit.retry_after() <= 60


def test_a_blocking_caller_sleeps_until_its_turn_and_turns_go_in_arrival_order() -> None:
    limit = rate_limit("turns", "20/s")
    turns = [limit.reserve(None) for _ in range(5)]
    assert all(turn.admitted for turn in turns)
    assert turns[0].wait == 0
    # Each turn one interval after the one before, by the server's clock, in calling order.
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(turns)]
    assert gaps == pytest.approx([0.05] * 4, abs=1e-5)
    assert [t.wait for t in turns] == sorted(t.wait for t in turns)
    started = time.monotonic()
    assert limit.acquire(blocking=True)
    assert time.monotonic() - started >= 0.2


def test_a_turn_beyond_blocking_timeout_is_not_taken() -> None:
    limit = rate_limit("patience", "1/m")
    assert limit.acquire()
    started = time.monotonic()
    assert not limit.acquire(blocking_timeout=1)
    assert time.monotonic() - started < 1
    assert 59 < limit.retry_after() <= 60  # the refused call took nothing


def test_check_raises_rate_limited_with_retry_after() -> None:
    limit = rate_limit("check", "2/h")
    limit.check()
    with pytest.raises(RateLimited) as raised:
        limit.check()
    assert 1790 < raised.value.retry_after <= 1800
    assert "'check' (2/h)" in str(raised.value)


def test_async_acquire_waits_its_turn() -> None:
    async def main() -> list[bool]:
        limit = rate_limit("async", "20/s")
        return [await limit.aacquire() for _ in range(3)]

    started = time.monotonic()
    assert asyncio.run(main()) == [True, True, True]
    assert time.monotonic() - started >= 0.1


@pytest.mark.parametrize(
    "rate", ["0/s", "-1/s", "abc", "10/fortnight", 10, "10", 2.5, "1.5/s", "", "10/"]
)
def test_a_bad_rate_is_refused_naming_the_accepted_forms(rate: object) -> None:
    with pytest.raises(ValueError, match='"N/s", "N/m", "N/h" or "N/d"'):
        rate_limit("bad", rate)  # type: ignore[arg-type]


@pytest.mark.parametrize("burst", [-1, True, 1.5, "3"])
def test_a_bad_burst_is_refused(burst: object) -> None:
    with pytest.raises((ValueError, TypeError), match="burst"):
        rate_limit("bad", "1/s", burst=burst)  # type: ignore[arg-type]


def test_garbage_at_the_key_starts_the_rate_afresh(redis_client: redis.Redis) -> None:
    limit = rate_limit("garbage", "1/m")
    assert limit.acquire(blocking=False)
    [key] = redis_client.keys("*:g:garbage")
    redis_client.set(key, "not a hash")
    assert limit.acquire(blocking=False)
    redis_client.hset(key, "t", "nan")
    assert limit.acquire(blocking=False)
    redis_client.hset(key, "t", "1e300")
    assert limit.acquire(blocking=False)
    assert not limit.acquire(blocking=False)
