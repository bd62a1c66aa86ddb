"""Fencing tokens rise strictly per name, and no key outlives its use."""

from __future__ import annotations

import redis
from django.test import override_settings

from django_redis_lock import Lock, get_lock_manager, lock
from django_redis_lock.scripts import STATS_TTL_MS
from tests.helpers import keys, token_of, wait_until


def _take(name: str, **options: object) -> Lock:
    held = lock(name, auto_renew=False, **options)  # type: ignore[arg-type]
    assert held.acquire(blocking=False)
    assert held.fencing_token is not None
    return held


def test_tokens_rise_across_release_expiry_force_release_and_clear() -> None:
    tokens = []
    held = _take("ledger")
    tokens.append(token_of(held))
    held.release()
    assert held.fencing_token is None

    held = _take("ledger", timeout=0.05)  # after a release
    tokens.append(token_of(held))
    wait_until(lambda: not held.locked())

    held = _take("ledger")  # after an expiry
    tokens.append(token_of(held))
    assert get_lock_manager().release("ledger")

    held = _take("ledger")  # after a force release
    tokens.append(token_of(held))
    assert get_lock_manager().clear("led*") == 1

    held = _take("ledger")  # after clear
    tokens.append(token_of(held))
    held.release()
    assert tokens == sorted(set(tokens)), tokens


def test_tokens_rise_after_the_tombstone_is_gone(redis_client: redis.Redis) -> None:
    with override_settings(REDIS_LOCK={"TOMBSTONE_TIMEOUT": 0.05}):
        held = _take("short-lived")
        first = held.fencing_token
        key = keys("short-lived").lock
        held.release()
        wait_until(lambda: not redis_client.exists(key))
        again = _take("short-lived")
        assert again.fencing_token > first  # type: ignore[operator]
        again.release()


def test_tokens_of_many_quick_holds_never_repeat() -> None:
    tokens = []
    for _ in range(200):
        with lock("quick") as held:
            tokens.append(token_of(held))
    assert tokens == sorted(set(tokens))


def test_no_key_stays_forever(redis_client: redis.Redis) -> None:
    holder = _take("transient")
    waiter = lock("transient", blocking_timeout=0.05)
    assert not waiter.acquire()
    holder.release()
    found = redis_client.keys("*transient*")
    assert found
    assert all(redis_client.pttl(key) > 0 for key in found)
    with override_settings(REDIS_LOCK={"TOMBSTONE_TIMEOUT": 0.05, "STATS": False}):
        with lock("gone"):
            pass
        wait_until(lambda: not redis_client.keys("*gone*"))
    # The statistics of a name outlive its tombstone, and end a day (used again: a week) after
    # its last use.
    with override_settings(REDIS_LOCK={"TOMBSTONE_TIMEOUT": 0.05}):
        with lock("gone"):
            pass
        wait_until(lambda: redis_client.keys("*gone*") == [keys("gone").stats.encode()])
        assert 0 < redis_client.pttl(keys("gone").stats) <= STATS_TTL_MS
