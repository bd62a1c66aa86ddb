"""What a semaphore (and a read/write lock) costs beside the lock, and how fully a contended
semaphore's places are used.

    python3 dev.py bench semaphore [--cycles 5000] [--repeats 3]

Starts its own Redis. Uncontended: ``with lock(name)``, ``with semaphore(name, 3)`` and a read
and a write of ``rwlock(name)`` in interleaved rounds, medians of the repeats. Contended: 8
processes take ``semaphore(name, 3)`` in turn, each sleeping 2 ms in it (work that waits on
I/O: eight processes spinning on two cores would measure the scheduler), for a few seconds; from
what they log (CLOCK_MONOTONIC, one clock for the machine) it measures each hand-over (from a
release, while someone waited, to the next start) and every span in which a place was free
while someone waited.
"""

from __future__ import annotations

import bisect
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import command_line, cycle_of, forked, interleaved, setup_django  # noqa: E402

from testproject.redis_server import RedisServer, find_redis_server  # noqa: E402

PROCESSES = 8
LIMIT = 3
HOLD_SECONDS = 0.002
CONTENDED_SECONDS = 4.0


def _contend(url: str) -> tuple[list[float], list[float]]:
    """Hand-over times and the spans with a free place while someone waited (seconds)."""
    import redis

    from django_redis_lock import semaphore

    log = redis.Redis.from_url(url)
    log.delete("bench:events")

    def take_turns(_: int) -> None:
        events = []
        deadline = time.monotonic() + CONTENDED_SECONDS
        while time.monotonic() < deadline:
            asked = time.monotonic()
            with semaphore("bench:contended", LIMIT):
                began = time.monotonic()
                time.sleep(HOLD_SECONDS)  # the work: I/O, as a hold's work mostly is
                ended = time.monotonic()
            events.append(f"{asked} {began} {ended}")
        with redis.Redis.from_url(url) as own:
            own.rpush("bench:events", *events)

    forked(PROCESSES, take_turns)
    holds = [tuple(map(float, row.split())) for row in log.lrange("bench:events", 0, -1)]
    return _handovers(holds), _idle_spans(holds)


def _handovers(holds: list[tuple[float, ...]]) -> list[float]:
    """For each release at which someone waited, the time to the next hold's start."""
    asks = sorted(asked for asked, _, _ in holds)
    starts = sorted(began for _, began, _ in holds)
    found = []
    for _, _, ended in holds:
        waiting = bisect.bisect_left(asks, ended) - bisect.bisect_left(starts, ended)
        at = bisect.bisect_left(starts, ended)
        if waiting > 0 and at < len(starts):
            found.append(starts[at] - ended)
    return found


# A process waits once its acquire was answered "busy": this long after it asked, about a
# round trip and the client's work (an acquire that is granted at once takes about that).
ANSWERED_AFTER = 0.001


def _idle_spans(holds: list[tuple[float, ...]]) -> list[float]:
    """The spans in which fewer than LIMIT held while at least one waited."""
    events = []
    for asked, began, ended in holds:
        if began - asked > ANSWERED_AFTER:
            events += [(asked + ANSWERED_AFTER, 0, 1), (began, 0, -1)]
        events += [(began, 1, 1), (ended, 1, -1)]
    events.sort()
    waiting = holding = 0
    spans, since = [], None
    for moment, kind, step in events:
        if kind == 0:
            waiting += step
        else:
            holding += step
        idle = waiting > 0 and holding < LIMIT
        if idle and since is None:
            since = moment
        elif not idle and since is not None:
            spans.append(moment - since)
            since = None
    return spans


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/benchmarks.rst."""
    server = RedisServer(binary=find_redis_server()).start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    from django.test.utils import override_settings

    from django_redis_lock import lock, rwlock, semaphore
    from testproject.settings import build_caches

    try:
        with override_settings(CACHES=build_caches(server.url)):
            timers = {
                "lock": cycle_of(lambda: lock("bench:lock")),
                "semaphore": cycle_of(lambda: semaphore("bench:semaphore", LIMIT)),
                "read": cycle_of(lambda: rwlock("bench:rw").read()),
                "write": cycle_of(lambda: rwlock("bench:rw").write()),
            }
            found = interleaved(timers, cycles, repeats)
            handovers, spans = _contend(server.url)
    finally:
        server.stop()
    mutex = found["lock"]
    handover = statistics.median(handovers) * 1000
    p99 = statistics.quantiles(handovers, n=100)[98] * 1000
    longest = max(spans) * 1000 if spans else 0.0
    past = sum(1 for span in spans if span * 1000 > p99)
    return [
        f"uncontended cycle (acquire + release): lock {mutex:.0f} µs, semaphore (limit 3) "
        f"{found['semaphore']:.0f} µs ({found['semaphore'] / mutex:.2f}x the lock), read "
        f"{found['read']:.0f} µs ({found['read'] / mutex:.2f}x), write {found['write']:.0f} "
        f"µs ({found['write'] / mutex:.2f}x)",
        f"contended, {PROCESSES} processes on limit {LIMIT}, 2 ms holds: a hand-over (a "
        f"release while someone waited, to the next start) takes {handover:.2f} ms at the "
        f"median, {p99:.2f} ms at p99 ({len(handovers)} hand-overs); a place was free while a "
        f"process waited (past its first answer) in {len(spans)} spans, {past} of them longer "
        f"than a p99 hand-over, the longest {longest:.2f} ms",
    ]


if __name__ == "__main__":
    command_line(measure, __doc__ or "")
