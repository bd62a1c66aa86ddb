"""Hostile probes of extend(): amounts at, near and over MAX_TIMEOUT, not numbers, or after
the release, on a lock, a semaphore place, a reader and a writer, added or replacing the
lease, through the sync and the async API.

The promise held: docs/locks.rst and docs/reference/api.rst on extend() and MAX_TIMEOUT (a
lease is capped at MAX_TIMEOUT, a bad amount is a ValueError or TypeError at the call and the
hold is kept, never lost silently), and docs/semaphores.rst (each holder has its own lease).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from django_redis_lock import MAX_TIMEOUT, LockNotOwned, get_lock_manager, lock, rwlock, semaphore
from tests.helpers import SyncDriver

REFUSED_AMOUNT = "additional_time must be a number of seconds from 0.001 up to 31536000"


def makers() -> dict[str, Callable[..., Any]]:
    """A holder of each kind, all of the name "extended", given the options passed."""
    return {
        "lock": lambda **kw: lock("extended", **kw),
        "semaphore": lambda **kw: semaphore("extended", 1, **kw),
        "read": lambda **kw: rwlock("extended", **kw).read(),
        "write": lambda **kw: rwlock("extended", **kw).write(),
    }


KINDS = ["lock", "semaphore", "read", "write"]


def blocked(kind: str) -> bool:
    """Whether a second holder of the same kind is kept out (a reader does not keep a reader
    out: a writer is asked instead)."""
    other = {"read": "write"}.get(kind, kind)
    return not makers()[other]().acquire(blocking=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("amount", [MAX_TIMEOUT, MAX_TIMEOUT - 1, MAX_TIMEOUT - 0.001, 1e6])
def test_add_near_max_is_capped_and_kept(driver: SyncDriver, kind: str, amount: float) -> None:
    held = makers()[kind](timeout=30)
    assert driver.acquire(held)
    driver.extend(held, amount)
    assert driver.owned(held)
    left = driver.ttl(held)
    assert left is not None
    assert left <= MAX_TIMEOUT + 0.01
    assert blocked(kind)
    driver.extend(held, amount)  # again: still capped, still held
    assert driver.owned(held)
    assert blocked(kind)
    holders = get_lock_manager().holders("extended")
    assert len(holders) == 1
    assert holders[0].ttl <= MAX_TIMEOUT + 0.01
    driver.release(held)
    assert not driver.locked(held)


@pytest.mark.parametrize("kind", KINDS)
def test_replace_with_max_is_kept(driver: SyncDriver, kind: str) -> None:
    held = makers()[kind](timeout=30)
    assert driver.acquire(held)
    driver.extend(held, MAX_TIMEOUT, replace_ttl=True)
    assert driver.owned(held)
    left = driver.ttl(held)
    assert left is not None
    assert MAX_TIMEOUT - 5 < left <= MAX_TIMEOUT
    assert blocked(kind)
    driver.release(held)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "amount", [MAX_TIMEOUT + 1, MAX_TIMEOUT + 0.001, math.inf, math.nan, 0, -1, 0.0001, 1e308]
)
def test_extend_over_max_or_bad_is_refused_and_the_hold_kept(
    driver: SyncDriver, kind: str, amount: float
) -> None:
    held = makers()[kind](timeout=30)
    assert driver.acquire(held)
    for replace in (False, True):
        with pytest.raises(ValueError, match=REFUSED_AMOUNT):
            driver.extend(held, amount, replace_ttl=replace)
    assert driver.owned(held)
    assert 25 < (driver.ttl(held) or 0) <= 30
    driver.release(held)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("amount", ["10", True, None.__class__, [1]])
def test_extend_bad_types_refused(kind: str, amount: object) -> None:
    held = makers()[kind](timeout=30)
    assert held.acquire()
    with pytest.raises(TypeError):
        held.extend(amount)
    with pytest.raises(TypeError):
        held.extend(10, replace_ttl="yes")
    assert held.owned()
    held.release()


@pytest.mark.parametrize("kind", KINDS)
def test_extend_none_adds_the_timeout(kind: str) -> None:
    held = makers()[kind](timeout=20, auto_renew=False)
    assert held.acquire()
    held.extend()
    left = held.ttl()
    assert left is not None
    assert 35 < left <= 40
    held.release()


@pytest.mark.parametrize("kind", KINDS)
def test_extend_after_release_raises_lock_not_owned(kind: str) -> None:
    held = makers()[kind](timeout=20)
    assert held.acquire()
    held.release()
    with pytest.raises(LockNotOwned):
        held.extend(MAX_TIMEOUT)


@pytest.mark.parametrize("kind", KINDS)
def test_extended_to_max_then_the_watchdog_keeps_it(kind: str) -> None:
    held = makers()[kind](timeout=0.3)
    assert held.acquire()
    held.extend(MAX_TIMEOUT, replace_ttl=True)
    time.sleep(0.5)  # the point: past the 0.3 s lease, through the watchdog's renewals of it
    assert held.owned()
    assert not held.lost
    held.release()


@pytest.mark.parametrize("kind", ["semaphore", "read"])
def test_a_place_at_max_is_listed_and_force_released(kind: str) -> None:
    held = makers()[kind](timeout=30)
    assert held.acquire()
    held.extend(MAX_TIMEOUT)
    held.extend(MAX_TIMEOUT)
    listed = list(get_lock_manager().list("extended"))
    assert len(listed) == 1
    assert get_lock_manager().release("extended")
    with pytest.raises(LockNotOwned):
        held.release()


def test_a_semaphore_with_two_places_at_max() -> None:
    a, b = semaphore("two-places", 2), semaphore("two-places", 2)
    assert a.acquire()
    assert b.acquire()
    a.extend(MAX_TIMEOUT)
    b.extend(MAX_TIMEOUT, replace_ttl=True)
    assert not semaphore("two-places", 2).acquire(blocking=False)
    assert a.owned()
    assert b.owned()
    a.release()
    b.release()


def test_max_timeout_as_lease_at_acquire() -> None:
    for held in (
        lock("max-lease-lock", timeout=MAX_TIMEOUT),
        semaphore("max-lease-semaphore", 1, timeout=MAX_TIMEOUT),
        rwlock("max-lease-rwlock", timeout=MAX_TIMEOUT).write(),
    ):
        assert held.acquire()
        held.extend(10)
        assert held.owned()
        held.extend(MAX_TIMEOUT)
        assert held.owned()
        held.release()
