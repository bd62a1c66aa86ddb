"""Semaphores and read/write locks under contention from several processes, and holders that
are SIGKILLed: checked from the sections the processes logged."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from django_redis_lock import rwlock, semaphore
from tests.helpers import fork_child, wait_children, wait_until

pytestmark = pytest.mark.slow

PROCESSES = 8
ROUNDS = 12
LIMIT = 3


def _most_at_once(sections: list[tuple[float, float]]) -> int:
    """The most sections (start, end) that overlap at one moment."""
    events = sorted([(start, 1) for start, _ in sections] + [(end, -1) for _, end in sections])
    most = now = 0
    for _, step in events:  # at a tie, an end (-1) sorts before a start: touching is no overlap
        now += step
        most = max(most, now)
    return most


def _logged(client: redis.Redis, key: str) -> list[tuple[float, float]]:
    return [
        (float(start), float(end))
        for start, end in (entry.decode().split() for entry in client.lrange(key, 0, -1))
    ]


def test_never_more_than_limit_holders_from_several_processes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    def work() -> None:
        with redis.Redis.from_url(redis_url) as log:
            for _ in range(ROUNDS):
                with semaphore("crowded", LIMIT, blocking_timeout=30):
                    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for the machine
                    time.sleep(0.01)
                    log.rpush("sections", f"{start} {time.monotonic()}")

    children = [fork_child(work) for _ in range(PROCESSES)]
    assert wait_children(children, timeout=120) == [0] * PROCESSES
    sections = _logged(redis_client, "sections")
    assert len(sections) == PROCESSES * ROUNDS
    assert _most_at_once(sections) == LIMIT  # full use, and never more


def test_one_writer_or_readers_from_several_processes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    def work(writes: bool) -> None:
        document = rwlock("shared-doc", blocking_timeout=30)
        with redis.Redis.from_url(redis_url) as log:
            for _ in range(ROUNDS):
                with document.write() if writes else document.read():
                    start = time.monotonic()
                    time.sleep(0.005)
                    log.rpush("writes" if writes else "reads", f"{start} {time.monotonic()}")

    children = [fork_child(lambda i=i: work(i % 4 == 0)) for i in range(PROCESSES)]
    assert wait_children(children, timeout=120) == [0] * PROCESSES
    writes, reads = _logged(redis_client, "writes"), _logged(redis_client, "reads")
    assert len(writes) == 2 * ROUNDS
    assert len(reads) == 6 * ROUNDS
    assert _most_at_once(writes) == 1
    for start, end in writes:  # no reader while a writer writes
        assert not [r for r in reads if r[0] < end and start < r[1]], (start, end)
    assert _most_at_once(reads) > 1  # readers did share


def test_sigkilled_holders_places_come_back_at_their_lease(redis_url: str) -> None:
    lease = 1.0

    def hold() -> None:
        held = semaphore("killed", 2, timeout=lease)
        assert held.acquire(blocking_timeout=10)
        with redis.Redis.from_url(redis_url) as client:
            client.rpush("holding", os.getpid())
        time.sleep(60)  # until killed; the watchdog renews meanwhile

    children = [fork_child(hold) for _ in range(2)]
    with redis.Redis.from_url(redis_url) as client:
        for _ in children:
            assert client.blpop(["holding"], timeout=30)
    assert not semaphore("killed", 2).acquire(blocking=False)
    time.sleep(2 * lease)  # renewed meanwhile: the places stay taken while their holders live
    assert not semaphore("killed", 2).acquire(blocking=False)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_children(children)
    first, second = semaphore("killed", 2), semaphore("killed", 2)
    assert first.acquire(blocking_timeout=10)
    wait_until(lambda: second.acquire(blocking=False), timeout=10)
    assert time.monotonic() - killed <= lease + 1.5  # the lease, not later
