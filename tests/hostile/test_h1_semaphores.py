"""Hostile probes, area 1: semaphores with a different limit per caller (real threads, async,
lease expiry), and area 4: a lock, a semaphore and a read/write lock of one name are apart."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from django_redis_lock import LockBusy, lock, locked, rwlock, semaphore
from django_redis_lock.runtime import runtime
from tests.helpers import async_driver, start, wait_until


def queued(name: str, kind: str = "s") -> int:
    backend = runtime().for_locks(None)
    return int(backend.client.zcard(backend.shared_keys_for(name, kind).queue))


class Section:
    """Counts holders in their sections; checks, at each entry, that the holders granted before
    this one (lower fencing token: tokens follow grant order) plus this one fit its limit."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.inside: dict[int, int] = {}  # token -> limit
        self.violations: list[str] = []
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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_limits_threads_never_over_admit_and_all_get_in(seed: int) -> None:
    rng = random.Random(seed)
    section = Section()
    failures: list[str] = []
    plan = [[rng.choice([1, 2, 3, 4]) for _ in range(6)] for _ in range(10)]

    def worker(limits: list[int]) -> None:
        for limit in limits:
            permit = semaphore("h1-mixed", limit, timeout=10, auto_renew=False)
            if not permit.acquire(blocking_timeout=30):
                failures.append(f"limit {limit}: not admitted in 30 s")
                continue
            token = permit.fencing_token
            assert token is not None
            section.enter(token, limit)
            time.sleep(rng.uniform(0.001, 0.02))
            section.leave(token)
            permit.release()

    threads = [threading.Thread(target=worker, args=(limits,)) for limits in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert section.violations == []
    assert section.peak >= 2  # larger limits did let several in


def test_mixed_limits_async_and_sync_together() -> None:
    section = Section()
    failures: list[str] = []

    async def one(limit: int) -> None:
        for _ in range(5):
            permit = semaphore("h1-mix-async", limit, timeout=10, auto_renew=False)
            if not await permit.aacquire(blocking_timeout=30):
                failures.append(f"async {limit}")
                continue
            assert permit.fencing_token is not None
            section.enter(permit.fencing_token, limit)
            await asyncio.sleep(0.005)
            section.leave(permit.fencing_token)
            await permit.arelease()

    def sync_worker(limit: int) -> None:
        for _ in range(5):
            permit = semaphore("h1-mix-async", limit, timeout=10, auto_renew=False)
            if not permit.acquire(blocking_timeout=30):
                failures.append(f"sync {limit}")
                continue
            assert permit.fencing_token is not None
            section.enter(permit.fencing_token, limit)
            time.sleep(0.005)
            section.leave(permit.fencing_token)
            permit.release()

    async def main() -> None:
        await asyncio.gather(*(one(limit) for limit in (1, 3, 2, 3, 1, 2)))

    threads = [threading.Thread(target=sync_worker, args=(limit,)) for limit in (2, 1, 3, 3)]
    for thread in threads:
        thread.start()
    asyncio.run(main())
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert section.violations == []


def test_one_release_admits_small_head_then_large_behind() -> None:
    a, b = semaphore("h1-seq", 3, timeout=10), semaphore("h1-seq", 3, timeout=10)
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    small = semaphore("h1-seq", 1, timeout=10)
    large = semaphore("h1-seq", 3, timeout=10)
    got_small = start(lambda: small.acquire(blocking_timeout=10))
    wait_until(lambda: queued("h1-seq") == 1)
    got_large = start(lambda: large.acquire(blocking_timeout=10))
    wait_until(lambda: queued("h1-seq") == 2)
    a.release()  # 1 holder left: small (limit 1) still does not fit, large waits behind it
    time.sleep(0.2)
    assert not got_small.done() and not got_large.done()
    b.release()  # 0 holders: small goes, and large (limit 3) fits beside it
    assert got_small.result(5) is True
    assert got_large.result(5) is True
    small.release()
    large.release()


def test_a_fitting_waiter_behind_a_timed_out_head_is_served_when_the_head_leaves() -> None:
    holder = semaphore("h1-leave", 3, timeout=10)
    assert holder.acquire()
    head = semaphore("h1-leave", 1, timeout=10)
    behind = semaphore("h1-leave", 3, timeout=10)
    got_head = start(lambda: head.acquire(blocking_timeout=0.5))
    wait_until(lambda: queued("h1-leave") == 1)
    got_behind = start(lambda: behind.acquire(blocking_timeout=8))
    wait_until(lambda: queued("h1-leave") == 2)
    assert got_head.result(5) is False
    began = time.monotonic()
    assert got_behind.result(5) is True  # the head left: behind fits (1 < 3)
    assert time.monotonic() - began < 2
    behind.release()
    holder.release()


def test_a_fitting_waiter_behind_a_cancelled_async_head_is_served() -> None:
    holder = semaphore("h1-cancel", 2, timeout=10)
    assert holder.acquire()
    behind = semaphore("h1-cancel", 2, timeout=10)
    with async_driver() as driver:
        head = semaphore("h1-cancel", 1, timeout=10)
        task_box: list[asyncio.Task[bool]] = []

        async def begin() -> None:
            task_box.append(asyncio.ensure_future(head.aacquire(blocking_timeout=10)))

        driver.run(begin())
        wait_until(lambda: queued("h1-cancel") == 1)
        got_behind = start(lambda: behind.acquire(blocking_timeout=8))
        wait_until(lambda: queued("h1-cancel") == 2)

        async def cancel() -> None:
            task_box[0].cancel()
            try:
                await task_box[0]
            except asyncio.CancelledError:
                pass

        driver.run(cancel())
        assert got_behind.result(5) is True
        assert not head.owned()
    behind.release()
    holder.release()


def test_a_small_limit_head_gets_in_when_crashed_holders_leases_end() -> None:
    for _ in range(2):
        assert semaphore("h1-crash", 3, timeout=0.5, auto_renew=False).acquire()
    waiter = semaphore("h1-crash", 1, timeout=10)
    began = time.monotonic()
    assert waiter.acquire(blocking_timeout=6)
    assert time.monotonic() - began < 3
    waiter.release()


def test_a_larger_limit_caller_gets_in_at_once_beside_small_limit_holders() -> None:
    small = semaphore("h1-larger", 1)
    assert small.acquire(blocking=False)
    big = semaphore("h1-larger", 5)
    assert big.acquire(blocking=False)
    smaller = semaphore("h1-larger", 2)
    assert not smaller.acquire(blocking=False)  # two hold: not fewer than 2
    small.release()
    big.release()


def test_non_blocking_caller_fits_but_a_non_fitting_head_waits() -> None:
    holder = semaphore("h1-nb", 5, timeout=10)
    assert holder.acquire()
    head = semaphore("h1-nb", 1, timeout=10)
    got = start(lambda: head.acquire(blocking_timeout=3))
    wait_until(lambda: queued("h1-nb") == 1)
    # documented: those behind a waiting head wait behind it (arrival order)
    assert not semaphore("h1-nb", 5).acquire(blocking=False)
    holder.release()
    assert got.result(5) is True
    head.release()


def test_many_waiters_one_release_wakes_every_one_it_frees_a_place_for() -> None:
    holders = [semaphore("h1-wake", 1, timeout=10) for _ in range(1)]
    assert holders[0].acquire()
    waiters = [semaphore("h1-wake", 4, timeout=10) for _ in range(3)]
    # limit 4 while one holds (limit-1 holder): they fit at once
    for w in waiters:
        assert w.acquire(blocking=False)
    late = [semaphore("h1-wake", 4, timeout=10) for _ in range(3)]
    got = []
    for n, w in enumerate(late):
        got.append(start(lambda w=w: w.acquire(blocking_timeout=10)))
        wait_until(lambda n=n: queued("h1-wake") == n + 1)
    holders[0].release()
    waiters[0].release()
    waiters[1].release()  # 1 holds: three places free under limit 4
    assert [g.result(5) for g in got] == [True, True, True]
    for w in [waiters[2], *late]:
        w.release()


def test_a_lease_expiry_of_a_lost_waiter_grant_passes_on() -> None:
    """A holder without renewal expires while a small-limit waiter waits behind a large one."""
    holder = semaphore("h1-exp", 2, timeout=0.6, auto_renew=False)
    assert holder.acquire()
    other = semaphore("h1-exp", 2, timeout=10)
    assert other.acquire()
    w1 = semaphore("h1-exp", 2, timeout=10)
    got = start(lambda: w1.acquire(blocking_timeout=6))
    wait_until(lambda: queued("h1-exp") == 1)
    began = time.monotonic()
    assert got.result(6) is True
    assert time.monotonic() - began < 3
    w1.release()
    other.release()


# ---- area 4: one name, three things apart


def test_lock_semaphore_rwlock_of_one_name_are_apart() -> None:
    held = lock("h4", auto_renew=False)
    permit = semaphore("h4", 1, auto_renew=False)
    writer = rwlock("h4", auto_renew=False).write()
    assert held.acquire(blocking=False)
    assert permit.acquire(blocking=False)
    assert writer.acquire(blocking=False)
    assert lock("h4").locked()
    held.release()
    assert permit.owned() and writer.owned()
    permit.release()
    assert writer.owned()
    assert not semaphore("h4", 1).locked()
    writer.release()


def test_a_reader_is_not_a_semaphore_place() -> None:
    reader = rwlock("h4r").read()
    assert reader.acquire(blocking=False)
    assert not semaphore("h4r", 1).locked()
    assert semaphore("h4r", 1).acquire(blocking=False)
    assert rwlock("h4r").read().acquire(blocking=False)


def test_locked_limit_1_excludes_locked_plain_both_ways() -> None:
    inside: list[str] = []

    @locked("h4-dec", limit=1)
    def one() -> str:
        return "one"

    @locked("h4-dec")
    def plain() -> str:
        return "plain"

    held = lock("h4-dec")
    assert held.acquire()
    with pytest.raises(LockBusy):
        one()
    held.release()

    @locked("h4-dec", limit=1)
    def outer() -> str:
        with pytest.raises(LockBusy):
            plain()
        inside.append("x")
        return "ok"

    assert outer() == "ok"
    assert inside == ["x"]


def test_locked_limit_2_is_the_semaphore_of_that_name() -> None:
    permits = [semaphore("h4-two", 2), semaphore("h4-two", 2)]
    for permit in permits:
        assert permit.acquire(blocking=False)

    @locked("h4-two", limit=2)
    def f() -> str:
        return "ran"

    with pytest.raises(LockBusy):
        f()
    permits[0].release()
    assert f() == "ran"
    permits[1].release()


def test_locked_limit_2_not_excluded_by_lock_of_that_name() -> None:
    held = lock("h4-apart")
    assert held.acquire()

    @locked("h4-apart", limit=2)
    def f() -> str:
        return "ran"

    assert f() == "ran"
    held.release()


def test_fencing_tokens_increase_across_lock_semaphore_and_rwlock_of_one_name() -> None:
    tokens = []
    for make in (lambda: lock("h4-tok"), lambda: semaphore("h4-tok", 2),
                 lambda: rwlock("h4-tok").read(), lambda: rwlock("h4-tok").write(),
                 lambda: lock("h4-tok")):
        held = make()
        assert held.acquire(blocking=False)
        tokens.append(held.fencing_token)
        held.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_mixed_limits_with_crashing_holders_and_async_waiters() -> None:
    """Some holders crash (short lease, no renewal, never released): their places come back at
    their lease end; everyone else gets in under their own limit."""
    section = Section()
    failures: list[str] = []
    rng = random.Random(7)

    def crasher() -> None:
        for _ in range(2):
            permit = semaphore("h1-crashy", rng.choice([2, 3]), timeout=0.4, auto_renew=False)
            permit.acquire(blocking_timeout=30)  # and never released

    def worker(limit: int) -> None:
        for _ in range(4):
            permit = semaphore("h1-crashy", limit, timeout=10, auto_renew=False)
            if not permit.acquire(blocking_timeout=30):
                failures.append(f"sync {limit}")
                continue
            assert permit.fencing_token is not None
            section.enter(permit.fencing_token, limit)
            time.sleep(0.01)
            section.leave(permit.fencing_token)
            permit.release()

    async def aworker(limit: int) -> None:
        for _ in range(4):
            permit = semaphore("h1-crashy", limit, timeout=10, auto_renew=False)
            if not await permit.aacquire(blocking_timeout=30):
                failures.append(f"async {limit}")
                continue
            assert permit.fencing_token is not None
            section.enter(permit.fencing_token, limit)
            await asyncio.sleep(0.01)
            section.leave(permit.fencing_token)
            await permit.arelease()

    threads = [threading.Thread(target=crasher) for _ in range(2)]
    threads += [threading.Thread(target=worker, args=(limit,)) for limit in (1, 2, 3, 4, 2)]
    for thread in threads:
        thread.start()

    async def main() -> None:
        await asyncio.gather(*(aworker(limit) for limit in (1, 3, 4)))

    asyncio.run(main())
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert section.violations == []


@pytest.mark.parametrize("kind", ["semaphore", "read", "write"])
def test_a_second_acquire_by_the_holder_raises_lock_error(kind: str) -> None:
    from django_redis_lock import LockError

    held = {"semaphore": lambda: semaphore("h1-re", 3), "read": lambda: rwlock("h1-re").read(),
            "write": lambda: rwlock("h1-re").write()}[kind]()
    assert held.acquire()
    with pytest.raises(LockError):
        held.acquire(blocking=False)
    assert held.owned()
    held.release()


def test_a_released_semaphore_object_can_acquire_again() -> None:
    permit = semaphore("h1-again", 1)
    for _ in range(3):
        assert permit.acquire(blocking=False)
        first = permit.fencing_token
        permit.release()
        assert permit.fencing_token is None
        assert first is not None


def test_limit_1000_many_holders_and_one_more_waits() -> None:
    holders = [semaphore("h1-big", 1000, auto_renew=False, timeout=30) for _ in range(1000)]
    for each in holders[:200]:
        assert each.acquire(blocking=False)
    small = semaphore("h1-big", 200)
    assert not small.acquire(blocking=False)
    big = semaphore("h1-big", 201)
    assert big.acquire(blocking=False)
