"""What bench/replicas.py and bench/stats.py share: Django set up for a Redis of the bench's
own, a timed lock cycle under given REDIS_LOCK settings, and interleaved rounds of timers."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Cycles per round; the timers take turns round by round.
ROUND_CYCLES = 250
Timer = Callable[[int], float]


def setup_django() -> None:
    """Django with testproject's settings and an in-memory database (before any lock)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ.setdefault("TESTPROJECT_DB", ":memory:")
    import django

    django.setup()


@contextlib.contextmanager
def own_redis() -> Iterator[str]:
    """A Redis of the benchmark's own, and Django set up with CACHES on it; its URL."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from testproject.redis_server import RedisServer, find_redis_server

    server = RedisServer(binary=find_redis_server()).start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    from django.test.utils import override_settings

    from testproject.settings import build_caches

    try:
        with override_settings(CACHES=build_caches(server.url)):
            yield server.url
    finally:
        server.stop()


def cycle_of(make: object) -> Timer:
    """A timer of ``count`` cycles of ``with make(): pass`` (µs each)."""

    def timed(count: int) -> float:
        with make():  # type: ignore[operator]
            pass  # connected, and the scripts loaded: outside the clock
        started = time.perf_counter()
        for _ in range(count):
            with make():  # type: ignore[operator]
                pass
        return (time.perf_counter() - started) / count * 1e6

    return timed


def lock_cycle(redis_lock: dict[str, Any], name: str) -> Timer:
    """A function timing ``count`` cycles of ``with lock(name): pass`` (µs each) under the
    REDIS_LOCK settings ``redis_lock``."""
    from django.test.utils import override_settings

    from django_redis_lock import lock

    def timed(count: int) -> float:
        with override_settings(REDIS_LOCK=redis_lock):
            with lock(f"{name}:warm"):  # a new backend per settings: connect outside the clock
                pass
            started = time.perf_counter()
            for _ in range(count):
                with lock(name):
                    pass
            return (time.perf_counter() - started) / count * 1e6

    return timed


def forked(count: int, work: Callable[[int], object]) -> None:
    """Run ``work(i)`` in ``count`` forked children (i from 0); wait for them all. A child
    exits 0 when ``work`` returned, 1 when it raised."""
    children = []
    for i in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                work(i)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def interleaved(timers: dict[str, Timer], cycles: int, repeats: int) -> dict[str, float]:
    """Each timer's µs per cycle: rounds of ROUND_CYCLES taken in turn (the order reversed
    every other round), the median of each repeat's round medians."""
    medians: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(repeats):
        times: dict[str, list[float]] = {name: [] for name in timers}
        for round_ in range(max(1, cycles // ROUND_CYCLES)):
            order = list(timers) if round_ % 2 == 0 else list(reversed(timers))
            for name in order:
                times[name].append(timers[name](ROUND_CYCLES))
        for name in timers:
            medians[name].append(statistics.median(times[name]))
    return {name: statistics.median(found) for name, found in medians.items()}


def command_line(measure: Callable[[int, int], list[str]], doc: str) -> None:
    """Run ``measure(cycles, repeats)`` as the command line asks; print its rows."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    for row in measure(options.cycles, options.repeats):
        print(f"- {row}")
