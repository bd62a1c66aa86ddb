"""Mutual exclusion across real processes, and a holder killed with SIGKILL."""

from __future__ import annotations

import itertools
import os
import signal
import time

import redis

from django_redis_lock import lock
from tests.helpers import PATIENT_SECONDS, spawn_child, wait_children


def _count_under_lock(url: str, rounds: int) -> None:
    client = redis.Redis.from_url(url, socket_timeout=PATIENT_SECONDS)
    for _ in range(rounds):
        with lock("counter", timeout=5):
            value = int(client.get("counter-value") or 0)  # read ...
            client.set("counter-value", value + 1)  # ... modify, write: safe only under lock


def test_four_processes_keep_a_non_atomic_counter_exact(
    redis_url: str, redis_client: redis.Redis
) -> None:
    pids = [spawn_child(_count_under_lock, redis_url, 100) for _ in range(4)]
    assert wait_children(pids) == [0, 0, 0, 0]
    assert int(redis_client.get("counter-value") or 0) == 400


def _hold_until_killed(url: str) -> None:
    held = lock("killed", timeout=1.0)  # auto-renewed: only death stops it
    held.acquire()
    redis.Redis.from_url(url, socket_timeout=PATIENT_SECONDS).rpush("holding", 1)
    time.sleep(60)


def test_lock_of_a_killed_holder_is_free_within_its_lease(
    redis_url: str, redis_client: redis.Redis
) -> None:
    pid = spawn_child(_hold_until_killed, redis_url)
    assert redis_client.blpop(["holding"], timeout=30)
    assert not lock("killed", blocking=False).acquire()
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_children([pid]) == [-signal.SIGKILL]
    survivor = lock("killed", blocking_timeout=5)
    assert survivor.acquire()
    assert time.monotonic() - killed < 1.0 + 0.3
    survivor.release()


def _sections(url: str, rounds: int) -> None:
    client = redis.Redis.from_url(url, socket_timeout=PATIENT_SECONDS)
    for _ in range(rounds):
        # A lease short enough for replies to come late under the load (a late grant is given
        # back), long enough that the holder's own few steps end inside it.
        with lock("crowded", timeout=0.3, blocking_timeout=60):
            entered = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process
            client.rpush("crowded-sections", f"{entered!r} {time.monotonic()!r}")


def test_forty_processes_on_short_leases_all_get_their_turn(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """40 processes on one lock with 0.3 s leases, on a machine with fewer cores: replies
    come late under such load, and a late grant is given back and waited for again, never an
    error for an acquire that may wait (issue 20); no two sections overlap."""
    pids = [spawn_child(_sections, redis_url, 3) for _ in range(40)]
    assert wait_children(pids) == [0] * 40
    sections = sorted(
        tuple(map(float, entry.split())) for entry in redis_client.lrange("crowded-sections", 0, -1)
    )
    assert len(sections) == 120
    for (_, left), (right, _) in itertools.pairwise(sections):
        assert left <= right, "two sections overlapped"
