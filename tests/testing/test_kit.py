"""The test kit's helpers and fault hooks, against the suite's real Redis."""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Iterator

import pytest

from django_redis_lock import (
    LeadershipLost,
    LockBusy,
    LockNotOwned,
    StaleFencingToken,
    leader,
    lock,
    rate_limit,
    rwlock,
    semaphore,
)
from django_redis_lock.signals import lock_lost
from django_redis_lock.testing import (
    Captured,
    advance_fence,
    assert_held,
    assert_not_held,
    captured_locks,
    expire_now,
    held,
    make_busy,
    pause_renewals,
    reset,
)
from tests.helpers import received, wait_until


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    reset()


def test_held_and_its_assertions() -> None:
    assert held("report") is None
    assert_not_held("report")
    with lock("report", label="monthly") as taken:
        info = assert_held("report", label="monthly")
        assert info.fencing_token == taken.fencing_token
        assert held("report") is not None
        assert held("report").fencing_token == info.fencing_token  # type: ignore[union-attr]
        with pytest.raises(AssertionError, match="'report' is held: report by"):
            assert_not_held("report")
        with pytest.raises(AssertionError, match=r"owner 'nobody' is not held\. Held now: report"):
            assert_held("report", owner="nobody")
    with pytest.raises(AssertionError, match="Nothing is held"):
        assert_held("report")


def test_bad_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        held("x", kind="mutex")
    with pytest.raises(ValueError, match="kind must be one of"):
        make_busy("x", kind="rate")
    with pytest.raises(ValueError, match="needs limit"):
        make_busy("x", kind="semaphore")
    with pytest.raises(TypeError, match="owner"):
        make_busy("x", owner="")


def test_make_busy_is_another_holder_with_its_owner() -> None:
    with make_busy("invoice:7", owner="worker 7") as busy:
        assert not lock("invoice:7").acquire(blocking=False)
        info = assert_held("invoice:7", owner="worker 7")
        assert busy.fencing_tokens == [info.fencing_token]
        with pytest.raises(LockBusy):
            make_busy("invoice:7")
    assert_not_held("invoice:7")
    make_busy("invoice:8")
    reset()  # releases what is still busy
    assert lock("invoice:8").acquire(blocking=False)


def test_locked_answers_busy() -> None:
    from django_redis_lock import locked

    @locked("job")
    def job() -> str:
        return "ran"

    make_busy("job")
    with pytest.raises(LockBusy):
        job()
    reset()
    assert job() == "ran"


def test_semaphores_and_read_write_locks() -> None:
    make_busy("pool", kind="semaphore", limit=2, owner="batch")
    assert not semaphore("pool", 2).acquire(blocking=False)
    assert held("pool", kind="semaphore") is not None
    assert_held("pool", kind="semaphore", owner="batch")
    assert held("pool") is None  # no lock of that name
    make_busy("doc", kind="read")
    with rwlock("doc").read():
        assert not rwlock("doc").write().acquire(blocking=False)
    assert_held("doc", kind="read")
    assert_not_held("doc", kind="write")
    reset()
    make_busy("doc", kind="write")
    assert not rwlock("doc").read().acquire(blocking=False)
    assert_held("doc", kind="write")


def test_leaders_and_rate_limits() -> None:
    make_busy("scheduler", kind="leader", owner="host-b")
    assert not leader("scheduler").acquire(blocking=False)
    assert_held("scheduler", kind="leader", owner="host-b")
    assert held("leader:scheduler") is not None  # the same hold, by its lock name
    reset()
    with leader("scheduler") as leading:
        assert assert_held("scheduler", kind="leader").fencing_token == leading.epoch
    assert_not_held("scheduler", kind="rate")
    assert rate_limit("api", "10/s").acquire(blocking=False)
    info = assert_held("api", kind="rate")
    assert info.rate is not None
    assert info.rate.rate == "10/s"


def test_captured_locks_in_order_with_kinds() -> None:
    with captured_locks() as taken:
        with lock("a"), semaphore("s", 3), rwlock("rw").read(), leader("boss"):
            pass
        with rwlock("rw").write():
            pass
    assert taken == [
        Captured("a", "lock"),
        Captured("s", "semaphore"),
        Captured("rw", "read"),
        Captured("boss", "leader"),
        Captured("rw", "write"),
    ]
    with lock("after"):
        pass
    assert len(taken) == 5  # recorded inside the block only


def test_expire_now_makes_the_holder_lose_at_once() -> None:
    held_lock = lock("job", timeout=60)
    held_lock.acquire()
    with received(lock_lost) as lost:
        ended = expire_now("job")
        assert held_lock.lost  # before expire_now returned: not a third of 60 s later
        assert [each["name"] for each in lost] == ["job"]
    assert [info.fencing_token for info in ended] == [held_lock.fencing_token]
    assert_not_held("job")
    with pytest.raises(LockNotOwned):
        held_lock.release()
    with pytest.raises(AssertionError, match="not held"):
        expire_now("job")


def test_expire_now_of_a_semaphore_place_and_a_busy_name() -> None:
    busy = make_busy("pool", kind="semaphore", limit=1)
    place = semaphore("pool", 2, timeout=60)
    assert place.acquire(blocking=False)
    expire_now("pool", kind="semaphore")
    assert place.lost
    assert all(holder.lost for holder in busy.holders)


def test_expire_now_cancels_an_async_leader() -> None:
    async def lead() -> bool:
        async with leader("boss", timeout=60) as leading:
            task = asyncio.current_task()
            assert task is not None
            await asyncio.to_thread(expire_now, "boss", kind="leader")
            assert leading.lost.is_set()
            await asyncio.sleep(10)  # cancelled by the loss
        return False

    with pytest.raises(LeadershipLost):
        asyncio.run(asyncio.wait_for(lead(), 10))


def test_expire_now_reaches_an_async_holder() -> None:
    async def hold() -> bool:
        taken = lock("async-job", timeout=60)
        await taken.aacquire()
        await asyncio.to_thread(expire_now, "async-job")
        return taken.lost

    assert asyncio.run(hold())


def test_pause_renewals_lets_a_short_lease_run_out() -> None:
    short = lock("short", timeout=0.3)
    short.acquire()
    with pause_renewals():
        wait_until(lambda: held("short") is None, timeout=5)
        assert not short.lost  # nobody looked: the process was as if paused
    wait_until(lambda: short.lost, timeout=5)  # found at once when renewals resume


def test_reset_ends_a_pause() -> None:
    paused = pause_renewals()
    paused.__enter__()
    reset()
    short = lock("short", timeout=0.3)
    short.acquire()
    wait_until(lambda: _held_for(short.name) > 0.6, timeout=5)  # renewed past two leases
    assert not short.lost
    short.release()
    paused.__exit__(None, None, None)  # after reset: nothing to undo


def _held_for(name: str) -> float:
    """Seconds since the hold of ``name`` began (0: not held)."""
    info = held(name)
    if info is None:
        return 0.0
    return (datetime.datetime.now(datetime.timezone.utc) - info.acquired_at).total_seconds()


@pytest.mark.django_db
def test_advance_fence_refuses_the_holders_next_write() -> None:
    from testproject.models import Account

    account = Account.objects.create(balance=10)
    taken = lock("account:1", timeout=60)
    taken.acquire()
    Account.objects.filter(pk=account.pk).fenced_update(taken, balance=20)
    later = advance_fence("account:1")
    assert later > (taken.fencing_token or 0)
    assert not taken.lost  # it does not know yet, as a paused holder
    with pytest.raises(StaleFencingToken):
        Account.objects.filter(pk=account.pk).fenced_update(taken, balance=30)
    account.balance = 40
    with pytest.raises(StaleFencingToken):
        account.save(fence=taken)
    with pytest.raises(LockNotOwned):  # its hold ended when the later one took the lock
        taken.release()
    account.refresh_from_db()
    assert account.balance == 20
    assert account.fence < later  # the declared write was rolled back with the refusal
    with lock("account:1") as next_holder:  # a hold after the later one writes
        assert Account.objects.filter(pk=account.pk).fenced_update(next_holder, balance=50) == 1
    reset()


def test_captured_from_another_thread() -> None:
    with captured_locks() as taken:
        worker = threading.Thread(target=lambda: lock("t").acquire() and None)
        worker.start()
        worker.join(5)
    assert taken == [Captured("t", "lock")]
