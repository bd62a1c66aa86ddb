"""Semaphores and read/write locks: places, leases, fencing, waiting, sync and async."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from django_redis_lock import MAX_TIMEOUT, LockBusy, LockNotOwned, lock, rwlock, semaphore
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.validation import MAX_LIMIT
from tests.helpers import SyncDriver, start, token_of, until, wait_until


def test_at_most_limit_holders_and_a_release_lets_the_next_in(driver: SyncDriver) -> None:
    first, second, third = (semaphore("reports", 2) for _ in range(3))
    assert driver.acquire(first)
    assert driver.acquire(second)
    assert not driver.acquire(third, blocking=False)
    assert driver.locked(third)
    assert not driver.owned(third)
    assert third.busy_ttl is not None
    assert 0 < third.busy_ttl <= 30
    tokens = [token_of(first), token_of(second)]
    driver.release(first)
    assert driver.acquire(third, blocking=False)
    assert tokens[0] < tokens[1] < token_of(third)
    driver.release(second)
    driver.release(third)
    assert not driver.locked(semaphore("reports", 2))


def test_a_waiter_is_handed_a_freed_place_in_arrival_order() -> None:
    holder = semaphore("gate", 1)
    assert holder.acquire()
    early, late = semaphore("gate", 1), semaphore("gate", 1)
    got_early = start(lambda: early.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("gate") == 1)
    got_late = start(lambda: late.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("gate") == 2)
    holder.release()
    assert got_early.result(5) is True
    assert not got_late.done()
    early.release()
    assert got_late.result(5) is True
    late.release()


def get_queue_length(name: str, kind: str = "s") -> int:
    """How many wait for the semaphore (``kind`` "s") or read/write lock ("r") ``name``."""
    from django_redis_lock.runtime import runtime

    backend = runtime().for_locks(None)
    assert isinstance(backend, LockBackend)
    return int(backend.client.zcard(backend.shared_keys_for(name, kind).queue))


def test_a_crashed_holders_place_comes_back_at_its_lease(redis_client: redis.Redis) -> None:
    crashed = semaphore("jobs", 1, timeout=0.5, auto_renew=False)
    assert crashed.acquire()  # and never released, nor renewed: as a holder that died
    waiter = semaphore("jobs", 1)
    began = time.monotonic()
    assert waiter.acquire(blocking_timeout=5)  # the first waiter looks again at the lease end
    assert time.monotonic() - began < 2
    with pytest.raises(LockNotOwned):
        crashed.release()
    waiter.release()


def test_the_watchdog_renews_each_holder() -> None:
    held = semaphore("long", 2, timeout=0.3)
    assert held.acquire()
    time.sleep(0.9)  # three leases: only renewals keep it
    assert held.owned()
    held.release()


def test_readers_share_and_a_writer_is_alone(driver: SyncDriver) -> None:
    document = rwlock("doc:1")
    readers = [document.read() for _ in range(3)]
    for reader in readers:
        assert driver.acquire(reader, blocking=False)
    writer = document.write()
    assert not driver.acquire(writer, blocking=False)
    for reader in readers:
        driver.release(reader)
    assert driver.acquire(writer, blocking=False)
    assert not driver.acquire(document.read(), blocking=False)
    assert not driver.acquire(document.write(), blocking=False)
    driver.release(writer)


def test_a_waiting_writer_is_not_starved_by_readers() -> None:
    document = rwlock("doc:2")
    reader = document.read()
    assert reader.acquire()
    writer = document.write()
    writing = start(lambda: writer.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("doc:2", "r") == 1)
    # A reader that comes while the writer waits waits behind it.
    assert not document.read().acquire(blocking=False)
    late_reader = document.read()
    reading = start(lambda: late_reader.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("doc:2", "r") == 2)
    reader.release()
    assert writing.result(5) is True
    assert not reading.done()
    writer.release()
    assert reading.result(5) is True
    late_reader.release()


def test_a_lock_a_semaphore_and_a_read_write_lock_of_one_name_are_apart(
    driver: SyncDriver,
) -> None:
    document = rwlock("apart")
    reader, permit, held = document.read(), semaphore("apart", 1), lock("apart")
    assert driver.acquire(reader, blocking=False)
    assert driver.acquire(permit, blocking=False)  # a reader takes no semaphore place
    assert driver.acquire(held, blocking=False)
    driver.release(reader)
    writer = document.write()
    assert driver.acquire(writer, blocking=False)  # the permit is no reader
    assert not driver.acquire(semaphore("apart", 1), blocking=False)
    for each in (writer, permit, held):
        driver.release(each)


def test_with_blocks_and_lockbusy() -> None:
    with semaphore("pair", 1), pytest.raises(LockBusy), semaphore("pair", 1, blocking_timeout=0):
        pass
    document = rwlock("doc:3", blocking_timeout=0)
    with document.write(), pytest.raises(LockBusy), document.read():
        pass


def test_a_cancelled_async_waiter_leaves_nothing_behind() -> None:
    holder = semaphore("async", 1)
    assert holder.acquire()

    async def cancelled() -> None:
        waiter = semaphore("async", 1)
        task = asyncio.ensure_future(waiter.aacquire(blocking_timeout=10))
        await until(lambda: get_queue_length("async") == 1)  # the task runs meanwhile
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert get_queue_length("async") == 0
    holder.release()
    assert not semaphore("async", 1).locked()  # no place was given to the cancelled waiter


def test_fencing_tokens_increase_per_name_across_kinds_and_holders() -> None:
    tokens = []
    for _ in range(3):
        with semaphore("fenced", 3) as held:
            tokens.append(token_of(held))
    with rwlock("fenced-rw").read() as reader:
        tokens_rw = [token_of(reader)]
    with rwlock("fenced-rw").write() as writer:
        tokens_rw.append(token_of(writer))
    assert tokens == sorted(set(tokens))
    assert tokens_rw == sorted(set(tokens_rw))


def test_the_limit_is_each_acquires_own() -> None:
    """A holder gets in when fewer than its limit hold the name: a smaller limit takes no
    place from holders already in, a larger one lets more in."""
    wide = [semaphore("changing", 3) for _ in range(3)]
    for each in wide:
        assert each.acquire(blocking=False)
    assert not semaphore("changing", 2).acquire(blocking=False)
    assert semaphore("changing", 4).acquire(blocking=False)


def test_a_freed_place_goes_to_a_waiter_under_its_own_limit_not_the_last_callers() -> None:
    """A waiter with a smaller limit is not let in beside the holders a larger limit admitted,
    whatever limit a later caller asked for."""
    holders = [semaphore("mixed", 2) for _ in range(2)]
    for each in holders:
        assert each.acquire(blocking=False)
    narrow = semaphore("mixed", 1)  # gets in only when nobody else holds it
    waiting = start(lambda: narrow.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("mixed") == 1)
    wide = semaphore("mixed", 2)
    waiting_wide = start(lambda: wide.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("mixed") == 2)
    holders[0].release()  # one holder left: too many for the narrow waiter
    assert not waiting.done()
    assert get_queue_length("mixed") == 2  # and the wide one waits behind it, in order
    holders[1].release()
    assert waiting.result(5) is True
    narrow.release()
    assert waiting_wide.result(5) is True
    wide.release()


def test_a_release_wakes_a_waiter_whose_limit_it_fits_whatever_the_last_caller_asked() -> None:
    holders = [semaphore("woken", 3) for _ in range(3)]
    for each in holders:
        assert each.acquire(blocking=False)
    waiter = semaphore("woken", 3)
    waiting = start(lambda: waiter.acquire(blocking_timeout=10))
    wait_until(lambda: get_queue_length("woken") == 1)
    assert not semaphore("woken", 1).acquire(blocking=False)  # a caller with another limit
    began = time.monotonic()
    holders[0].release()
    assert waiting.result(5) is True
    assert time.monotonic() - began < 2  # woken by the release, not by its own wait's end
    waiter.release()
    for each in holders[1:]:
        each.release()


def test_a_place_extended_past_max_timeout_is_capped_and_kept(driver: SyncDriver) -> None:
    first, second = semaphore("capped", 2, auto_renew=False), semaphore("capped", 2)
    assert driver.acquire(first)
    assert driver.acquire(second)
    driver.extend(first, MAX_TIMEOUT)
    assert MAX_TIMEOUT - 60 < driver.ttl(first) <= MAX_TIMEOUT  # type: ignore[operator]
    assert not driver.acquire(semaphore("capped", 2), blocking=False)  # still two holders
    assert driver.owned(first)
    driver.release(first)
    driver.release(second)


@pytest.mark.parametrize(
    ("limit", "error"),
    [(0, ValueError), (MAX_LIMIT + 1, ValueError), (True, TypeError), ("3", TypeError)],
)
def test_a_bad_limit_is_refused_at_the_call(limit: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="limit"):
        semaphore("x", limit)


def test_options_they_do_not_take_are_refused_not_ignored() -> None:
    with pytest.raises(TypeError, match="'limit'"):
        rwlock("x", limit=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'reentrant'"):
        rwlock("x", reentrant=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'reentrant'"):
        semaphore("x", 2, reentrant=True)  # type: ignore[call-arg]


def test_bad_options_are_refused_at_the_call() -> None:
    with pytest.raises(ValueError, match="timeout"):
        rwlock("x", timeout=0)
    with pytest.raises(ValueError, match="empty"):
        rwlock("")
    with pytest.raises(ValueError, match="blocking_timeout"):
        semaphore("x", 2, blocking_timeout=-1)
