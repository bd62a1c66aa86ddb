"""Semaphores and read/write locks under contention from several processes, and holders that
are SIGKILLed: checked from the sections the processes logged."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
import redis

from django_redis_lock import rwlock, semaphore
from django_redis_lock.backends.base import text_of
from tests.helpers import PATIENT_SECONDS, spawn_child, wait_children, wait_until

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
        for start, end in (text_of(entry).split() for entry in client.lrange(key, 0, -1))
    ]


def _ready(log: redis.Redis) -> None:
    """In a spawned process: say it is up, and wait until all of the test's are (they take
    a while to start), so that they contend."""
    log.rpush("ready", os.getpid())
    assert log.blpop(["go"], timeout=60)


def _spawn_together(redis_url: str, target: Callable[..., None]) -> list[int]:
    """PROCESSES spawned processes running ``target(i, redis_url)``, let go at once."""
    children = [spawn_child(target, i, redis_url) for i in range(PROCESSES)]
    try:
        # A patient client: the processes may take seconds to start.
        with redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS) as client:
            for _ in children:
                assert client.blpop(["ready"], timeout=60)
            client.rpush("go", *children)
    except BaseException:
        wait_children(children, timeout=0)  # none left behind
        raise
    return children


def _take_places(i: int, redis_url: str) -> None:
    with redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS) as log:
        _ready(log)
        for _ in range(ROUNDS):
            with semaphore("crowded", LIMIT, blocking_timeout=30):
                start = time.monotonic()  # CLOCK_MONOTONIC: one clock for the machine
                time.sleep(0.01)
                log.rpush("sections", f"{start} {time.monotonic()}")


def test_never_more_than_limit_holders_from_several_processes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    children = _spawn_together(redis_url, _take_places)
    assert wait_children(children, timeout=120) == [0] * PROCESSES
    sections = _logged(redis_client, "sections")
    assert len(sections) == PROCESSES * ROUNDS
    assert _most_at_once(sections) == LIMIT  # full use, and never more


def _read_or_write(i: int, redis_url: str) -> None:
    writes = i % 4 == 0
    document = rwlock("shared-doc", blocking_timeout=30)
    with redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS) as log:
        _ready(log)
        for _ in range(ROUNDS):
            with document.write() if writes else document.read():
                start = time.monotonic()
                time.sleep(0.005)
                log.rpush("writes" if writes else "reads", f"{start} {time.monotonic()}")


def test_one_writer_or_readers_from_several_processes(
    redis_client: redis.Redis, redis_url: str
) -> None:
    children = _spawn_together(redis_url, _read_or_write)
    assert wait_children(children, timeout=120) == [0] * PROCESSES
    writes, reads = _logged(redis_client, "writes"), _logged(redis_client, "reads")
    assert len(writes) == 2 * ROUNDS
    assert len(reads) == 6 * ROUNDS
    assert _most_at_once(writes) == 1
    for start, end in writes:  # no reader while a writer writes
        assert not [r for r in reads if r[0] < end and start < r[1]], (start, end)
    assert _most_at_once(reads) > 1  # readers did share


LEASE = 1.0


def _hold_until_killed(redis_url: str) -> None:
    held = semaphore("killed", 2, timeout=LEASE)
    assert held.acquire(blocking_timeout=10)
    with redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS) as client:
        client.rpush("holding", os.getpid())
    time.sleep(60)  # until killed; the watchdog renews meanwhile


def test_sigkilled_holders_places_come_back_at_their_lease(redis_url: str) -> None:
    lease = LEASE
    children = [spawn_child(_hold_until_killed, redis_url) for _ in range(2)]
    with redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS) as client:
        for _ in children:
            assert client.blpop(["holding"], timeout=90)  # spawning may crawl on a busy machine
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
