"""cache_once under a stampede, and how soon a waiter has the value once it is stored.

    python3 dev.py bench cache_once [--cycles 200] [--repeats 5]

Starts its own Redis. Stampede: in each of ``repeats`` rounds, 4 forked processes with 25
threads each call ``cache_once`` on one new key at once (a computation of 50 ms, counted in
Redis): how many computations ran, and how many callers got the value.

Wake-up: two forked processes, a writer and a waiter, take ``cycles`` turns of two cases,
interleaved. The floor: the writer holds a plain lock, the waiter queues for it, the writer
stores the value (``cache.set``) and releases; the waiter, woken by the release, reads the value
(one ``cache.get``). cache_once: the writer computes, the waiter's cache_once queues behind it;
the writer's cache_once stores the value and releases; the waiter's cache_once returns it. Both
measured from the end of the writer's ``cache.set`` to the waiter having the value
(CLOCK_MONOTONIC, one clock for the machine); medians and p90, and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rounds import forked, own_redis

PROCESSES, THREADS = 4, 25
COMPUTE_SECONDS = 0.05
VALUE = {"rows": list(range(20))}


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=60)


def _together(log: Any, key: str, count: int) -> None:
    """Return once ``count`` processes called this with ``key`` (a bench's start line)."""
    log.incr(key)
    deadline = time.monotonic() + 60
    while int(log.get(key) or 0) < count:
        assert time.monotonic() < deadline, "the processes did not all start"
        time.sleep(0.001)


def stampede(url: str, rounds: int) -> list[tuple[int, int]]:
    """Per round, (computations, callers that got the value)."""
    from django_redis_lock import cache_once

    log = _client(url)

    def callers(index: int) -> None:
        own = _client(url)
        for round_ in range(rounds):
            key = f"bench:stampede:{round_}"

            def compute(key: str = key) -> dict[str, Any]:
                own.incr(f"{key}:computations")
                time.sleep(COMPUTE_SECONDS)  # the work: a query, say
                return VALUE

            _together(own, f"{key}:start", PROCESSES)
            with ThreadPoolExecutor(THREADS) as pool:
                got = list(
                    pool.map(lambda _, c=compute, k=key: cache_once(k, c, 60), range(THREADS))
                )
            own.incrby(f"{key}:served", sum(value == VALUE for value in got))

    forked(PROCESSES, callers)
    return [
        (int(log.get(f"bench:stampede:{r}:computations") or 0),
         int(log.get(f"bench:stampede:{r}:served") or 0))
        for r in range(rounds)
    ]  # fmt: skip


def _queued(client: Any, keys: Any) -> None:
    """Return once one waiter is in the queue ``keys.queue`` (the bench's setup, not timed)."""
    deadline = time.monotonic() + 10
    while client.zcard(keys.queue) < 1:
        assert time.monotonic() < deadline, "the waiter did not queue"


def wake_ups(url: str, cycles: int) -> dict[str, list[float]]:
    """Per case ("floor", "cache_once"), the waiter's latency after the store (seconds)."""
    from django.core.cache import caches

    from django_redis_lock import cache_once, lock
    from django_redis_lock.runtime import runtime

    log = _client(url)

    def writer() -> None:
        own, cache = _client(url), caches["default"]
        backend = runtime().backend(None)
        stored = cache.set

        def timed_set(*args: Any, **kwargs: Any) -> None:
            stored(*args, **kwargs)
            own.rpush("bench:stored", repr(time.monotonic()))

        cache.set = timed_set  # type: ignore[method-assign]
        for cycle in range(cycles):
            with lock(f"bench:floor:{cycle}"):
                own.rpush("bench:floor:go", cycle)
                _queued(own, backend.keys_for(f"bench:floor:{cycle}"))
                cache.set(f"bench:floor:{cycle}", VALUE, 60)

            def compute(cycle: int = cycle) -> dict[str, Any]:
                own.rpush("bench:once:go", cycle)
                _queued(own, backend.shared_keys_for(f"cache_once:bench:once:{cycle}", "r"))
                return VALUE

            cache_once(f"bench:once:{cycle}", compute, 60)

    def waiter() -> None:
        own, cache = _client(url), caches["default"]
        for _ in range(cycles):
            cycle = int(own.blpop(["bench:floor:go"], timeout=60)[1])
            with lock(f"bench:floor:{cycle}"):
                assert cache.get(f"bench:floor:{cycle}") == VALUE
                own.rpush("bench:had", repr(time.monotonic()))
            cycle = int(own.blpop(["bench:once:go"], timeout=60)[1])
            assert cache_once(f"bench:once:{cycle}", dict, 60) == VALUE
            own.rpush("bench:had", repr(time.monotonic()))

    forked(2, lambda index: writer() if index == 0 else waiter())
    stored = [float(each) for each in log.lrange("bench:stored", 0, -1)]
    had = [float(each) for each in log.lrange("bench:had", 0, -1)]
    latencies = [after - before for before, after in zip(stored, had, strict=True)]
    return {"floor": latencies[0::2], "cache_once": latencies[1::2]}


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[8]


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/performance.rst."""
    with own_redis() as url:
        rounds = stampede(url, repeats)
        found = wake_ups(url, cycles)
    computed = [computations for computations, _ in rounds]
    served = [callers for _, callers in rounds]
    floor, once = found["floor"], found["cache_once"]
    ratio = statistics.median(once) / statistics.median(floor)
    return [
        f"stampede: {PROCESSES * THREADS} concurrent misses of one key from {PROCESSES} "
        f"processes ({THREADS} threads each), {len(rounds)} rounds: computations per round "
        f"{computed}, callers served the value per round {served}",
        f"a waiter has the value {statistics.median(once) * 1e6:.0f} µs (median; p90 "
        f"{_p90(once) * 1e6:.0f}) after the writer stored it; the wake-up floor (a plain lock's "
        f"waiter woken by the release, then one cache.get) {statistics.median(floor) * 1e6:.0f} "
        f"µs (p90 {_p90(floor) * 1e6:.0f}): {ratio:.2f}x the floor ({len(once)} cycles each)",
    ]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    for row in measure(options.cycles, options.repeats):
        print(f"- {row}")
