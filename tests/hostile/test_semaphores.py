"""Hostile probes of semaphores: callers that each bring their own limit (real threads, async
tasks, holders that crash and leave their lease to run out, waiters that time out or are
cancelled), and a lock, a semaphore and a read/write lock that share one name.

The promise held: docs/semaphores.rst, "At most limit holders at once" (each acquire's own
limit, arrival order, a release wakes every waiter it frees a place for), "Waiting is a
lock's" (a crashed holder's place comes back at its lease end, a waiter that leaves passes its
place on) and "Fencing" (tokens of a name increase across every kind).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from concurrent.futures import Future

import pytest

from django_redis_lock import (
    Lock,
    LockBusy,
    LockError,
    get_lock_manager,
    lock,
    locked,
    rwlock,
    semaphore,
)
from tests.helpers import async_driver, server_backend, start, token_of, wait_until


def queued(name: str, kind: str = "s") -> int:
    """How many wait for the semaphore (``kind`` "s") or read/write lock ("r") ``name``."""
    backend = server_backend()
    return int(backend.client.zcard(backend.shared_keys_for(name, kind).queue))


def wait_in_line(permit: Lock, blocking_timeout: float) -> Future[bool]:
    """Start ``permit``'s acquire in a thread; return its future once it is queued."""
    before = queued(permit.name)
    got = start(lambda: permit.acquire(blocking_timeout=blocking_timeout))
    wait_until(lambda: queued(permit.name) == before + 1)
    return got


class Section:
    """Counts holders in their sections; checks, at each entry, that the holders granted before
    this one (lower fencing token: tokens follow grant order) plus this one fit its limit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.guard = threading.Lock()
        self.inside: dict[int, int] = {}  # token -> limit
        self.violations: list[str] = []
        self.failures: list[str] = []
        self.peak = 0

    def enter(self, token: int, limit: int) -> None:
        with self.guard:
            before = [t for t in self.inside if t < token]
            if len(before) + 1 > limit:
                self.violations.append(
                    f"token {token} limit {limit} admitted with {len(before)} earlier holders"
                )
            self.inside[token] = limit
            self.peak = max(self.peak, len(self.inside))

    def leave(self, token: int) -> None:
        with self.guard:
            del self.inside[token]

    def hold(self, limit: int, work: float) -> None:
        """One turn of a thread: get a place under ``limit``, work ``work`` s in it, leave."""
        permit = semaphore(self.name, limit, timeout=10, auto_renew=False)
        if not permit.acquire(blocking_timeout=30):
            self.failures.append(f"sync {limit}: not admitted in 30 s")
            return
        token = permit.fencing_token
        if token is None:
            self.failures.append(f"sync {limit}: admitted without a fencing token")
            return
        self.enter(token, limit)
        time.sleep(work)  # the work done in the section: holds overlap
        self.leave(token)
        permit.release()

    async def ahold(self, limit: int, work: float) -> None:
        """One turn of a task, as ``hold`` through the async API."""
        permit = semaphore(self.name, limit, timeout=10, auto_renew=False)
        if not await permit.aacquire(blocking_timeout=30):
            self.failures.append(f"async {limit}: not admitted in 30 s")
            return
        token = permit.fencing_token
        if token is None:
            self.failures.append(f"async {limit}: admitted without a fencing token")
            return
        self.enter(token, limit)
        await asyncio.sleep(work)  # the work done in the section: holds overlap
        self.leave(token)
        await permit.arelease()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_limits_threads_never_over_admit_and_all_get_in(seed: int) -> None:
    rng = random.Random(seed)
    section = Section("mixed-limits")
    plan = [[rng.choice([1, 2, 3, 4]) for _ in range(6)] for _ in range(10)]

    def worker(limits: list[int]) -> None:
        for limit in limits:
            section.hold(limit, rng.uniform(0.001, 0.02))

    threads = [threading.Thread(target=worker, args=(limits,)) for limits in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not any(thread.is_alive() for thread in threads)
    assert section.failures == []
    assert section.violations == []
    assert section.peak >= 2  # larger limits did let several in


def test_mixed_limits_async_and_sync_together() -> None:
    section = Section("mixed-sync-async")

    async def one(limit: int) -> None:
        for _ in range(5):
            await section.ahold(limit, 0.005)

    def sync_worker(limit: int) -> None:
        for _ in range(5):
            section.hold(limit, 0.005)

    async def main() -> None:
        await asyncio.gather(*(one(limit) for limit in (1, 3, 2, 3, 1, 2)))

    threads = [threading.Thread(target=sync_worker, args=(limit,)) for limit in (2, 1, 3, 3)]
    for thread in threads:
        thread.start()
    asyncio.run(main())
    for thread in threads:
        thread.join(60)
    assert section.failures == []
    assert section.violations == []


def test_a_small_limit_head_and_a_large_limit_waiter_behind_it_get_in_on_the_last_release() -> None:
    a, b = semaphore("seq", 3, timeout=10), semaphore("seq", 3, timeout=10)
    assert a.acquire(blocking=False)
    assert b.acquire(blocking=False)
    small = semaphore("seq", 1, timeout=10)
    large = semaphore("seq", 3, timeout=10)
    got_small = wait_in_line(small, 10)
    got_large = wait_in_line(large, 10)
    a.release()  # 1 holder left: small (limit 1) still does not fit, large waits behind it
    # The release hands places over in its own script: what it gave is in Redis when it returns.
    assert [info.fencing_token for info in get_lock_manager().holders("seq")] == [b.fencing_token]
    assert queued("seq") == 2
    assert not got_small.done()
    assert not got_large.done()
    b.release()  # 0 holders: small goes, and large (limit 3) fits beside it
    assert got_small.result(5) is True
    assert got_large.result(5) is True
    small.release()
    large.release()


def test_a_fitting_waiter_behind_a_timed_out_head_is_served_when_the_head_leaves() -> None:
    holder = semaphore("head-leaves", 3, timeout=10)
    assert holder.acquire()
    head = semaphore("head-leaves", 1, timeout=10)
    behind = semaphore("head-leaves", 3, timeout=10)
    # The head's half-second wait running out is the point.
    got_head = wait_in_line(head, 0.5)
    got_behind = wait_in_line(behind, 8)
    assert got_head.result(5) is False
    began = time.monotonic()
    assert got_behind.result(5) is True  # the head left: behind fits (1 < 3)
    assert time.monotonic() - began < 2
    behind.release()
    holder.release()


def test_a_fitting_waiter_behind_a_cancelled_async_head_is_served() -> None:
    holder = semaphore("head-cancelled", 2, timeout=10)
    assert holder.acquire()
    behind = semaphore("head-cancelled", 2, timeout=10)
    with async_driver() as driver:
        head = semaphore("head-cancelled", 1, timeout=10)
        task_box: list[asyncio.Task[bool]] = []

        async def begin() -> None:
            task_box.append(asyncio.ensure_future(head.aacquire(blocking_timeout=10)))

        driver.run(begin())
        wait_until(lambda: queued("head-cancelled") == 1)
        got_behind = wait_in_line(behind, 8)

        async def cancel() -> None:
            task_box[0].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_box[0]

        driver.run(cancel())
        assert got_behind.result(5) is True
        assert not head.owned()
    behind.release()
    holder.release()


def test_a_small_limit_head_gets_in_when_crashed_holders_leases_end() -> None:
    for _ in range(2):  # crashed: never released nor renewed, their half-second leases run out
        assert semaphore("crashed-holders", 3, timeout=0.5, auto_renew=False).acquire()
    waiter = semaphore("crashed-holders", 1, timeout=10)
    began = time.monotonic()
    assert waiter.acquire(blocking_timeout=6)
    assert time.monotonic() - began < 3
    waiter.release()


def test_a_larger_limit_caller_gets_in_at_once_beside_small_limit_holders() -> None:
    small = semaphore("larger-limit", 1)
    assert small.acquire(blocking=False)
    big = semaphore("larger-limit", 5)
    assert big.acquire(blocking=False)
    smaller = semaphore("larger-limit", 2)
    assert not smaller.acquire(blocking=False)  # two hold: not fewer than 2
    small.release()
    big.release()


def test_non_blocking_caller_fits_but_a_non_fitting_head_waits() -> None:
    holder = semaphore("non-blocking", 5, timeout=10)
    assert holder.acquire()
    head = semaphore("non-blocking", 1, timeout=10)
    got = wait_in_line(head, 3)
    # documented: those behind a waiting head wait behind it (arrival order)
    assert not semaphore("non-blocking", 5).acquire(blocking=False)
    holder.release()
    assert got.result(5) is True
    head.release()


def test_many_waiters_one_release_wakes_every_one_it_frees_a_place_for() -> None:
    narrow = semaphore("wake-many", 1, timeout=10)
    assert narrow.acquire()
    waiters = [semaphore("wake-many", 4, timeout=10) for _ in range(3)]
    # limit 4 while one holds (limit-1 holder): they fit at once
    for w in waiters:
        assert w.acquire(blocking=False)
    late = [semaphore("wake-many", 4, timeout=10) for _ in range(3)]
    got = []
    for w in late:
        got.append(wait_in_line(w, 10))
    narrow.release()
    waiters[0].release()
    waiters[1].release()  # 1 holds: three places free under limit 4
    assert [g.result(5) for g in got] == [True, True, True]
    for w in [waiters[2], *late]:
        w.release()


def test_a_waiter_gets_the_place_of_a_holder_whose_lease_ran_out() -> None:
    """A holder without renewal expires while a waiter waits: its place passes on at the lease
    end (the 0.6 s lease running out is the point)."""
    holder = semaphore("lease-ends", 2, timeout=0.6, auto_renew=False)
    assert holder.acquire()
    other = semaphore("lease-ends", 2, timeout=10)
    assert other.acquire()
    w1 = semaphore("lease-ends", 2, timeout=10)
    got = wait_in_line(w1, 6)
    began = time.monotonic()
    assert got.result(6) is True
    assert time.monotonic() - began < 3
    w1.release()
    other.release()


# ---- one name, three things apart


def test_lock_semaphore_rwlock_of_one_name_are_apart() -> None:
    held = lock("one-name", auto_renew=False)
    permit = semaphore("one-name", 1, auto_renew=False)
    writer = rwlock("one-name", auto_renew=False).write()
    assert held.acquire(blocking=False)
    assert permit.acquire(blocking=False)
    assert writer.acquire(blocking=False)
    assert lock("one-name").locked()
    held.release()
    assert permit.owned()
    assert writer.owned()
    permit.release()
    assert writer.owned()
    assert not semaphore("one-name", 1).locked()
    writer.release()


def test_a_reader_is_not_a_semaphore_place() -> None:
    reader = rwlock("one-name-read").read()
    assert reader.acquire(blocking=False)
    assert not semaphore("one-name-read", 1).locked()
    assert semaphore("one-name-read", 1).acquire(blocking=False)
    assert rwlock("one-name-read").read().acquire(blocking=False)


def test_locked_limit_1_excludes_locked_plain_both_ways() -> None:
    inside: list[str] = []

    @locked("decorated", limit=1)
    def one() -> str:
        return "one"

    @locked("decorated")
    def plain() -> str:
        return "plain"

    held = lock("decorated")
    assert held.acquire()
    with pytest.raises(LockBusy):
        one()
    held.release()

    @locked("decorated", limit=1)
    def outer() -> str:
        with pytest.raises(LockBusy):
            plain()
        inside.append("x")
        return "ok"

    assert outer() == "ok"
    assert inside == ["x"]


def test_locked_limit_2_is_the_semaphore_of_that_name() -> None:
    permits = [semaphore("decorated-two", 2), semaphore("decorated-two", 2)]
    for permit in permits:
        assert permit.acquire(blocking=False)

    @locked("decorated-two", limit=2)
    def f() -> str:
        return "ran"

    with pytest.raises(LockBusy):
        f()
    permits[0].release()
    assert f() == "ran"
    permits[1].release()


def test_locked_limit_2_not_excluded_by_lock_of_that_name() -> None:
    held = lock("decorated-apart")
    assert held.acquire()

    @locked("decorated-apart", limit=2)
    def f() -> str:
        return "ran"

    assert f() == "ran"
    held.release()


def test_fencing_tokens_increase_across_lock_semaphore_and_rwlock_of_one_name() -> None:
    tokens = []
    for make in (
        lambda: lock("tokens"),
        lambda: semaphore("tokens", 2),
        lambda: rwlock("tokens").read(),
        lambda: rwlock("tokens").write(),
        lambda: lock("tokens"),
    ):
        held = make()
        assert held.acquire(blocking=False)
        tokens.append(token_of(held))
        held.release()
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


def test_mixed_limits_with_crashing_holders_and_async_waiters() -> None:
    """Some holders crash (short lease, no renewal, never released): their places come back at
    their lease end (the 0.4 s leases running out is the point); everyone else gets in under
    their own limit."""
    section = Section("crashing")
    rng = random.Random(7)

    def crasher() -> None:
        for _ in range(2):
            permit = semaphore("crashing", rng.choice([2, 3]), timeout=0.4, auto_renew=False)
            permit.acquire(blocking_timeout=30)  # and never released

    def worker(limit: int) -> None:
        for _ in range(4):
            section.hold(limit, 0.01)

    async def aworker(limit: int) -> None:
        for _ in range(4):
            await section.ahold(limit, 0.01)

    threads = [threading.Thread(target=crasher) for _ in range(2)]
    threads += [threading.Thread(target=worker, args=(limit,)) for limit in (1, 2, 3, 4, 2)]
    for thread in threads:
        thread.start()

    async def main() -> None:
        await asyncio.gather(*(aworker(limit) for limit in (1, 3, 4)))

    asyncio.run(main())
    for thread in threads:
        thread.join(60)
    assert section.failures == []
    assert section.violations == []


@pytest.mark.parametrize("kind", ["semaphore", "read", "write"])
def test_a_second_acquire_by_the_holder_raises_lock_error(kind: str) -> None:
    held = {
        "semaphore": lambda: semaphore("twice", 3),
        "read": lambda: rwlock("twice").read(),
        "write": lambda: rwlock("twice").write(),
    }[kind]()
    assert held.acquire()
    with pytest.raises(LockError):
        held.acquire(blocking=False)
    assert held.owned()
    held.release()


def test_a_released_semaphore_object_can_acquire_again() -> None:
    permit = semaphore("again", 1)
    for _ in range(3):
        assert permit.acquire(blocking=False)
        first = permit.fencing_token
        permit.release()
        assert permit.fencing_token is None
        assert first is not None


def test_among_200_holders_only_a_caller_with_a_higher_limit_gets_in() -> None:
    holders = [semaphore("limit-1000", 1000, auto_renew=False, timeout=30) for _ in range(1000)]
    for each in holders[:200]:
        assert each.acquire(blocking=False)
    small = semaphore("limit-1000", 200)
    assert not small.acquire(blocking=False)
    big = semaphore("limit-1000", 201)
    assert big.acquire(blocking=False)
