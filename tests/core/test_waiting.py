"""Waiting: woken by the release itself, one connection per process, fair, bounded.

A test taking the ``driver`` fixture runs with waiters that use the blocking API and with
waiters that use the async one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import redis

from django_redis_lock import Lock, lock, signals
from django_redis_lock.backends.base import text_of
from django_redis_lock.runtime import runtime
from tests.helpers import (
    SYNC,
    SyncDriver,
    commandstats,
    keys,
    listen,
    spawn_child,
    start,
    wait_children,
    wait_until,
)


@pytest.fixture
def listening() -> None:
    """This process already listens for grants, as it does after its first wait."""
    listen()


#: The hand-over lease of the tests that wait for one to run out (the default is 5 s).
SHORT_HANDOVER = 1.5


@pytest.fixture
def short_handover(settings: Any) -> None:
    """REDIS_LOCK["HANDOVER_LEASE"] set to SHORT_HANDOVER, and this process listening."""
    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "HANDOVER_LEASE": SHORT_HANDOVER}
    listen()


@pytest.fixture
def busy_events() -> Iterator[threading.Semaphore]:
    """A semaphore released each time an acquire finds the lock busy (and, queued, waits)."""
    seen = threading.Semaphore(0)

    def receiver(**kwargs: Any) -> None:
        seen.release()

    signals.lock_busy.connect(receiver, weak=False)
    yield seen
    signals.lock_busy.disconnect(receiver)


def _waiter(driver: SyncDriver, name: str, **options: Any) -> Future[tuple[bool, float]]:
    """A thread that acquires ``name`` through ``driver`` and releases it if it got it; the
    future holds whether it did, and when (time.monotonic())."""

    def run() -> tuple[bool, float]:
        waiting = lock(name, **options)
        got = driver.acquire(waiting)
        result = (got, time.monotonic())
        if got:
            driver.release(waiting)
        return result

    return start(run)


def _waiting_connections(client: redis.Redis) -> int:
    """Connections in pub/sub mode or blocked in a command (BLPOP and the like)."""
    return sum(1 for entry in client.client_list() if set(entry["flags"]) & {"P", "b"})


@pytest.mark.usefixtures("listening")
def test_waiter_is_woken_by_release_and_sends_nothing_while_waiting(
    redis_client: redis.Redis, busy_events: threading.Semaphore, driver: SyncDriver
) -> None:
    holder = lock("handoff", timeout=30, auto_renew=False)
    holder.acquire()
    waiter = _waiter(driver, "handoff", blocking_timeout=20)
    assert busy_events.acquire(timeout=5)  # the waiter is queued
    redis_client.config_resetstat()
    time.sleep(0.3)  # a window in which a polling waiter would show up
    stats = commandstats(redis_client)
    # Only the measurement itself: CONFIG RESETSTAT ("config" before Redis 7) and INFO.
    assert {name for name in stats if not name.startswith(("config", "info"))} == set()
    released = time.monotonic()
    holder.release()
    got, at = waiter.result(5)
    assert got
    assert at - released < 0.1  # the lease had 30 s left: the release woke it


@pytest.mark.usefixtures("listening")
def test_connections_used_for_waiting_do_not_grow_with_waiters(
    redis_client: redis.Redis, busy_events: threading.Semaphore, driver: SyncDriver
) -> None:
    # Listeners of earlier tests' settings close within a second of being stopped.
    wait_until(lambda: _waiting_connections(redis_client) == 1, timeout=3)
    holder = lock("crowd", auto_renew=False)  # a 30 s lease nobody renews
    holder.acquire()
    waiters = [_waiter(driver, "crowd", blocking_timeout=20) for _ in range(20)]
    for _ in waiters:
        assert busy_events.acquire(timeout=5)
    assert _waiting_connections(redis_client) == 1  # the one pub/sub connection
    holder.release()
    # Within 10 s, long before the holder's lease ends: the release woke them, in turn.
    deadline = time.monotonic() + 10
    results = [waiter.result(max(0, deadline - time.monotonic())) for waiter in waiters]
    assert all(got for got, _ in results)


def test_blocking_timeout_is_honoured_and_leaves_no_queue_entry(
    redis_client: redis.Redis, driver: SyncDriver
) -> None:
    holder = lock("deadline", auto_renew=False)
    holder.acquire()
    waiter = lock("deadline")
    started = time.monotonic()
    assert not driver.acquire(waiter, blocking_timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 0.45
    assert redis_client.zcard(keys("deadline").queue) == 0
    assert not lock("deadline").acquire(blocking=False)
    holder.release()


def test_non_blocking_and_zero_timeout_try_once(driver: SyncDriver) -> None:
    holder = lock("once")
    holder.acquire()
    attempts: list[Callable[[], bool]] = [
        lambda: driver.acquire(lock("once", blocking=False)),
        lambda: driver.acquire(lock("once"), blocking_timeout=0),
    ]
    for attempt in attempts:
        started = time.monotonic()
        assert not attempt()
        assert time.monotonic() - started < 0.1
    holder.release()


def test_waiter_of_a_crashed_holder_wakes_when_the_lease_ends(driver: SyncDriver) -> None:
    crashed = lock("orphan", timeout=0.5, auto_renew=False)
    crashed.acquire()  # never released: like a holder that died
    started = time.monotonic()
    waiter = lock("orphan", blocking_timeout=5)
    assert driver.acquire(waiter)
    elapsed = time.monotonic() - started
    assert 0.35 < elapsed < 0.7
    driver.release(waiter)


def test_the_next_waiter_is_told_the_lease_of_a_first_waiter_that_took_over_an_ended_one(
    redis_client: redis.Redis,
) -> None:
    """Two holders in a row die (leases of 0.5 s): the third waiter takes over at the end of
    the second lease, not a slice of the hand-over lease (4 s) later. The second took the
    lock by its own look when the first lease ended, not from a release: it tells the next."""
    crashed = lock("orphans", timeout=0.5, auto_renew=False)
    assert crashed.acquire()  # never released: like a holder that died
    second = lock("orphans", timeout=0.5, auto_renew=False)  # it dies too, once it holds
    third = lock("orphans", timeout=0.5, auto_renew=False)
    got_second = start(lambda: second.acquire(blocking_timeout=10))
    wait_until(lambda: redis_client.zcard(keys("orphans").queue) == 1)
    got_third = start(lambda: third.acquire(blocking_timeout=10))
    wait_until(lambda: redis_client.zcard(keys("orphans").queue) == 2)
    assert got_second.result(5) is True  # at the end of the first lease
    taken = time.monotonic()
    assert got_third.result(5) is True
    assert time.monotonic() - taken < 1.5  # the second lease, not a 4 s slice
    third.release()


def test_a_greedy_holder_cannot_starve_a_waiter(busy_events: threading.Semaphore) -> None:
    cycles = 0
    stop = threading.Event()

    def greedy() -> None:
        nonlocal cycles
        while not stop.is_set() and cycles < 5000:
            with lock("contended", auto_renew=False):
                cycles += 1

    thread = threading.Thread(target=greedy)
    thread.start()
    try:
        patient = lock("contended", blocking_timeout=10)
        queued_at: list[int] = []

        def note(**kwargs: Any) -> None:  # sent in this thread once the waiter has queued
            if kwargs["lock"] is patient:
                queued_at.append(cycles)

        signals.lock_busy.connect(note, weak=False)
        try:
            assert patient.acquire()
        finally:
            signals.lock_busy.disconnect(note)
        # Not queued at all (taken between two of the greedy thread's holds): none overtook.
        overtaken = cycles - queued_at[0] if queued_at else 0
        patient.release()
    finally:
        stop.set()
        thread.join(10)
    # Queued waiters are served first come, first served: at most the greedy thread's hold
    # in progress, plus one that started before the waiter queued, finish ahead of it.
    assert overtaken <= 3, overtaken


def test_waiters_are_served_in_arrival_order(
    listening: None, busy_events: threading.Semaphore, driver: SyncDriver
) -> None:
    holder = lock("fifo", auto_renew=False)  # a 30 s lease nobody renews
    holder.acquire()
    order: list[int] = []
    waiters = []
    for i in range(5):
        waiters.append(start(functools.partial(_take_and_record, driver, "fifo", i, order)))
        assert busy_events.acquire(timeout=5)  # waiter i is queued before i + 1 starts
    holder.release()
    # Within 10 s, long before the holder's lease ends: the release woke them, in turn.
    deadline = time.monotonic() + 10
    for waiter in waiters:
        waiter.result(max(0, deadline - time.monotonic()))
    assert order == [0, 1, 2, 3, 4]


def _take_and_record(driver: SyncDriver, name: str, index: int, order: list[int]) -> None:
    with driver.entered(lock(name, blocking_timeout=10)):
        order.append(index)


def test_async_waiter_lets_other_coroutines_run() -> None:
    holder = lock("async-wait", auto_renew=False)
    holder.acquire()

    async def main() -> tuple[bool, int, bool]:
        waiter: Lock = lock("async-wait", blocking_timeout=10)
        task = asyncio.create_task(waiter.aacquire())
        loop = asyncio.get_running_loop()
        ticks, worst_gap, last = 0, 0.0, loop.time()
        for _ in range(20):
            await asyncio.sleep(0.01)
            now = loop.time()
            ticks, worst_gap, last = ticks + 1, max(worst_gap, now - last), now
        waited = not task.done()
        assert worst_gap < 0.05  # a blocked loop would stall the ticker
        await asyncio.get_running_loop().run_in_executor(None, holder.release)
        got = await asyncio.wait_for(task, 5)
        await waiter.arelease()
        return got, ticks, waited

    got, ticks, waited = asyncio.run(main())
    assert got
    assert ticks == 20
    assert waited


@pytest.mark.usefixtures("listening")
def test_grant_sent_while_the_listener_reconnects_is_not_lost(
    redis_client: redis.Redis, busy_events: threading.Semaphore, driver: SyncDriver
) -> None:
    holder = lock("reconnect", timeout=30, auto_renew=False)
    holder.acquire()
    waiter = _waiter(driver, "reconnect", blocking_timeout=20)
    assert busy_events.acquire(timeout=5)
    assert redis_client.client_kill_filter(_type="pubsub") >= 1  # the listener is cut off
    released = time.monotonic()
    holder.release()  # the grant is published while nobody listens
    got, at = waiter.result(8)
    assert got
    # Well before the 10 s wait slice: the listener made its waiters look again on reconnect.
    assert at - released < 3


def test_cancelled_async_waiter_leaves_the_queue(
    redis_client: redis.Redis, busy_events: threading.Semaphore
) -> None:
    holder = lock("cancelled", auto_renew=False)
    holder.acquire()

    async def main() -> None:
        task = asyncio.create_task(lock("cancelled", timeout=30).aacquire())
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, busy_events.acquire, True, 5)  # it is queued
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert redis_client.zcard(keys("cancelled").queue) == 0
    holder.release()
    assert lock("cancelled").acquire(blocking=False)  # nobody was handed a dead hold


def _wait_in_the_queue(name: str, timeout: float) -> None:
    """What a spawned child does: wait for ``name`` (until it is killed, as a rule)."""
    lock(name, timeout=timeout).acquire(blocking_timeout=30)


@pytest.mark.slow
def test_a_newcomer_does_not_jump_the_queue_when_a_lease_runs_out(
    redis_client: redis.Redis,
) -> None:
    holder = lock("queue-jump", timeout=60, auto_renew=False)  # never released: it dies
    holder.acquire()
    pid = spawn_child(_wait_in_the_queue, "queue-jump", 60)
    queue_jump = keys("queue-jump")
    wait_until(lambda: redis_client.zcard(queue_jump.queue) == 1, timeout=30)
    os.kill(pid, signal.SIGKILL)  # queued for seconds yet, but it will not look again
    wait_children([pid])
    holder.extend(0.5, replace_ttl=True)  # the lease runs out half a second from now
    wait_until(lambda: not redis_client.exists(queue_jump.lock), timeout=2)  # lease over
    newcomer = lock("queue-jump")
    assert not newcomer.acquire(blocking=False)  # the lock went to the waiter queued first
    owner = redis_client.hget(queue_jump.lock, "o")
    assert owner is not None
    assert f"pid {pid} " in text_of(owner)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dead_timeout", "lease"),
    [
        (60, SHORT_HANDOVER),  # the next waiter looks again in time by itself
        (1, 1.0),  # a lease shorter than the next waiter's slice: it is told when it ends
    ],
)
@pytest.mark.usefixtures("short_handover")
def test_waiter_killed_while_queued_delays_the_next_by_the_hand_over_lease_only(
    redis_client: redis.Redis, dead_timeout: float, lease: float
) -> None:
    holder = lock("dead-waiter", auto_renew=False)
    holder.acquire()
    pid = spawn_child(_wait_in_the_queue, "dead-waiter", dead_timeout)
    queue = keys("dead-waiter").queue
    wait_until(lambda: redis_client.zcard(queue) == 1, timeout=30)
    os.kill(pid, signal.SIGKILL)
    wait_children([pid])
    waiter = _waiter(SYNC, "dead-waiter", blocking_timeout=20)
    wait_until(lambda: redis_client.zcard(queue) == 2)
    released = time.monotonic()
    holder.release()  # handed to the dead waiter, for the short hand-over lease only
    got, at = waiter.result(20)
    assert got
    assert at - released < lease + 1.5  # not the dead one's whole TTL


@pytest.mark.slow
@pytest.mark.usefixtures("short_handover")
def test_a_handed_over_lock_gets_its_full_lease_before_the_hand_over_lease_ends(
    busy_events: threading.Semaphore,
) -> None:
    holder = lock("full-lease", auto_renew=False)
    holder.acquire()
    for auto_renew in (True, False):
        waiter = lock("full-lease", timeout=60, auto_renew=auto_renew, blocking_timeout=10)
        thread = threading.Thread(target=waiter.acquire)
        thread.start()
        assert busy_events.acquire(timeout=5)
        holder.release()
        thread.join(5)
        assert waiter.fencing_token is not None
        assert (waiter.ttl() or 0) <= SHORT_HANDOVER

        # Lengthened at a third of the hand-over lease: well before it ends.
        def lengthened(held: Lock = waiter) -> bool:
            return (held.ttl() or 0) > 55

        wait_until(lengthened, timeout=SHORT_HANDOVER / 2)
        holder = waiter


@pytest.mark.usefixtures("listening")
def test_a_short_hold_handed_over_costs_no_request_beyond_acquire_and_release(
    redis_client: redis.Redis, busy_events: threading.Semaphore, driver: SyncDriver
) -> None:
    with lock("warm-up"):  # loads the scripts, once per server
        pass
    holder = lock("short-hold")
    holder.acquire()
    waiter = lock("short-hold", blocking_timeout=10)
    taking = start(lambda: driver.acquire(waiter))
    assert busy_events.acquire(timeout=5)
    redis_client.config_resetstat()
    holder.release()  # hands the lock over: the waiter sends nothing to take it
    assert taking.result(5)
    driver.release(waiter)
    assert commandstats(redis_client).get("evalsha") == 2  # the two releases, no lengthening


@pytest.mark.usefixtures("listening")
def test_a_hand_over_wakes_only_the_new_holder(
    redis_client: redis.Redis, busy_events: threading.Semaphore
) -> None:
    holder = lock("one-wake-up")
    holder.acquire()
    waiters = []
    for _ in range(3):  # queued one after another
        waiters.append(_waiter(SYNC, "one-wake-up", blocking_timeout=10))
        assert busy_events.acquire(timeout=5)
    redis_client.config_resetstat()
    holder.release()
    assert [waiter.result(10)[0] for waiter in waiters] == [True] * 3
    # Three hand-overs, one message each: the waiters behind look again in time by themselves.
    assert commandstats(redis_client).get("publish") == 3


def test_only_the_first_waiter_looks_again_when_a_renewed_lease_ends(
    redis_client: redis.Redis, busy_events: threading.Semaphore
) -> None:
    holder = lock("renewed-holder", timeout=0.3)  # renewed every 0.1 s while held
    holder.acquire()
    waiters = [_waiter(SYNC, "renewed-holder", blocking_timeout=20) for _ in range(10)]
    for _ in waiters:
        assert busy_events.acquire(timeout=5)
    redis_client.config_resetstat()
    time.sleep(1.0)  # a window of about three leases
    calls = commandstats(redis_client).get("evalsha", 0)
    # About 10 renewals and a few looks by the first waiter; ten polling waiters send ~40 more.
    assert calls < 25, calls
    holder.release()
    assert [waiter.result(10)[0] for waiter in waiters] == [True] * 10


@pytest.mark.usefixtures("listening")
def test_the_listener_comes_back_quickly_however_often_it_was_cut_off(
    redis_client: redis.Redis, busy_events: threading.Semaphore
) -> None:
    channel = runtime().one_listener(runtime().backend()).channel

    def subscribed() -> bool:
        return bool(redis_client.pubsub_numsub(channel)[0][1])

    holder = lock("cut-often", timeout=30, auto_renew=False)
    holder.acquire()
    waiter = _waiter(SYNC, "cut-often", blocking_timeout=20)  # the listener reconnects for it
    assert busy_events.acquire(timeout=5)
    for _ in range(7):  # a pause that doubled with every loss would reach 6.4 s
        assert redis_client.client_kill_filter(_type="pubsub") >= 1
        cut = time.monotonic()
        wait_until(subscribed, timeout=10)
        assert time.monotonic() - cut < 1
    redis_client.client_kill_filter(_type="pubsub")
    released = time.monotonic()
    holder.release()  # published while nobody listens
    got, at = waiter.result(8)
    assert got
    assert at - released < 1.5  # the waiter looked again once the listener was back
