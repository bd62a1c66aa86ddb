"""100 concurrent misses of one key from 4 processes (25 threads each): one computation, and
every caller gets its value; nothing stays held. A computing process that is SIGKILLed: a
waiter takes over once its lease ends."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.test.utils import override_settings

from django_redis_lock import cache_once, get_lock_manager
from tests.cached.scenarios import queued, settled
from tests.helpers import (
    PATIENT_SECONDS,
    server_backend,
    spawn_child,
    start,
    wait_children,
    wait_until,
)

pytestmark = pytest.mark.slow

PROCESSES, THREADS = 4, 25
KEY = "stampede"


def fill_from_threads(index: int, threads: int) -> None:
    """In a spawned process: ``threads`` threads call cache_once(KEY) at once; the one that
    computes counts it and waits for the test's go; each logs the value it got."""
    log = redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=PATIENT_SECONDS)

    def compute() -> dict[str, int]:
        log.incr("computations")
        assert log.blpop(["go"], timeout=60)
        return {"answer": 42, "process": index}

    def call() -> None:
        log.rpush("results", json.dumps(cache_once(KEY, compute, 60)))

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(call) for _ in range(threads)]:
            future.result()


def test_a_hundred_misses_in_four_processes_compute_once(redis_client: redis.Redis) -> None:
    children = [spawn_child(fill_from_threads, i, THREADS) for i in range(PROCESSES)]
    backend = server_backend()
    queue = backend.shared_keys_for(f"cache_once:{KEY}", "r").queue
    try:
        # Every caller missed: one computes, the 99 others wait in the lock's queue.
        wait_until(lambda: redis_client.zcard(queue) == PROCESSES * THREADS - 1, timeout=60)
        assert redis_client.get("computations") == b"1"
    finally:
        redis_client.rpush("go", "go")
    assert wait_children(children) == [0] * PROCESSES
    results = [json.loads(entry) for entry in redis_client.lrange("results", 0, -1)]
    assert len(results) == PROCESSES * THREADS
    assert len({json.dumps(result, sort_keys=True) for result in results}) == 1
    assert redis_client.get("computations") == b"1"
    assert list(get_lock_manager().list("cache_once:*")) == []
    stats = get_lock_manager().get_stats(f"cache_once:{KEY}")
    assert stats is not None
    assert stats.avoided == PROCESSES * THREADS - 1


def compute_forever(key: str) -> None:
    """In a spawned process: cache_once(key) with a computation that says it started, then
    never ends (the test kills the process)."""
    log = redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=PATIENT_SECONDS)

    def compute() -> str:
        log.rpush("computing", os.getpid())
        time.sleep(PATIENT_SECONDS)  # killed long before
        return "never"

    cache_once(key, compute, 60)


def test_a_killed_computing_process_is_taken_over_when_its_lease_ends(
    redis_client: redis.Redis,
) -> None:
    lease = 1.0
    with override_settings(REDIS_LOCK={"TIMEOUT": lease}):
        child = spawn_child(compute_forever, "orphan")
        assert redis_client.blpop(["computing"], timeout=90)
        waiter = start(lambda: cache_once("orphan", lambda: "taken over", 60))
        wait_until(lambda: queued("orphan") == 1)
        time.sleep(2 * lease)  # renewed meanwhile: the waiter waits while the writer lives
        assert not waiter.done()
        os.kill(child, signal.SIGKILL)
        killed = time.monotonic()
        wait_children([child])
        assert waiter.result(10) == "taken over"
        assert time.monotonic() - killed <= lease + 1.5  # the lease, not later
    settled()
