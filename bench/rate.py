"""A rate limit shared by processes: how accurate, what one attempt costs, how fair the turns.

    python3 dev.py bench rate [--seconds 10] [--processes 16] [--cycles 5000] [--repeats 3]

Starts its own Redis. Accuracy: 16 forked processes make non-blocking attempts
(``reserve(0.0)``) at ``rate_limit(name, "100/s")`` for 10 s from a common start, once with no
burst and once with a burst of 1; each logs the server's time of every admission
(``Turn.at``), and the figures are the calls admitted and the most admitted in any one-second
window (half-open, slid over every admission) by the server's clock. Cost: interleaved
rounds, medians of the repeats, of an uncontended ``check()`` (admitted: a rate no round can
spend), a refused ``reserve(0.0)`` (a rate spent for the day), and one uncontended
``acquire()`` of a lock (a fresh name each, its Lock made outside the clock, released outside
it: the acquire's round trip alone), with the round trips per attempt (the requests the
server read). Fairness: callers that block (``reserve(None)``, then a sleep until the turn,
as ``acquire()`` does) at "200/s", 8 threads of one process, then 8 processes: each call logs
when it was sent and answered (CLOCK_MONOTONIC, one clock for the machine), its turn and when
it woke (the server's clock and the machine's wall clock, one clock on loopback); the order
held when no call answered before another was sent got a later turn than that one; the
waits (sent to woken), worst against median; and how late the sleepers woke past their turns.
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import Timer, forked, interleaved, setup_django  # noqa: E402

from testproject.redis_server import RedisServer, find_redis_server  # noqa: E402

RATE, PER_SECOND = "100/s", 100
#: The bursts of the accuracy runs: none (calls spaced evenly), and one call of slack.
BURSTS = (0, 1)
FAIR_RATE, FAIR_CALLERS, FAIR_SECONDS = "200/s", 8, 3.0
US = 1_000_000


def accuracy(url: str, processes: int, seconds: float, burst: int) -> tuple[int, int, int, float]:
    """Admitted in all, the most in a second, the attempts, and the span of the admissions."""
    import redis

    from django_redis_lock import rate_limit

    log = redis.Redis.from_url(url)
    log.delete("bench:admitted", "bench:attempts")
    start = time.monotonic() + 1.0  # every child forked and connected by then

    def hammer(_: int) -> None:
        limit = rate_limit(f"bench:accuracy:{burst}", RATE, burst=burst)
        admitted, attempts = [], 0
        limit.retry_after()  # connected, the scripts loaded: before the start
        time.sleep(max(0.0, start - time.monotonic()))
        while time.monotonic() < start + seconds:
            turn = limit.reserve(0.0)
            attempts += 1
            if turn.admitted:
                admitted.append(str(round(turn.at * US)))
        with redis.Redis.from_url(url) as own:
            own.rpush("bench:admitted", *admitted or ["none"])
            own.incrby("bench:attempts", attempts)

    forked(processes, hammer)
    times = sorted(int(t) for t in log.lrange("bench:admitted", 0, -1) if t != b"none")
    return (
        len(times),
        _most_in_a_window(times, US),
        int(log.get("bench:attempts") or 0),
        (times[-1] - times[0]) / US,
    )


def _most_in_a_window(times: list[int], window: int) -> int:
    """The most of ``times`` (sorted) in any half-open window of ``window`` from one of them."""
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


def _timed(attempt: object) -> Timer:
    def timed(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            attempt()  # type: ignore[operator]
        return (time.perf_counter() - started) / count * 1e6

    return timed


def _acquires() -> Timer:
    """``count`` uncontended acquires of fresh names (µs each), the Locks made and released
    outside the clock."""
    from django_redis_lock import lock

    rounds = iter(range(10**9))

    def timed(count: int) -> float:
        round_ = next(rounds)
        locks = [lock(f"bench:acquire:{round_}:{i}", auto_renew=False) for i in range(count)]
        started = time.perf_counter()
        for held in locks:
            held.acquire()
        elapsed = time.perf_counter() - started
        for held in locks:
            held.release()
        return elapsed / count * 1e6

    return timed


def cost(url: str, cycles: int, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """µs per attempt of each, and the round trips per attempt of each."""
    import redis

    from django_redis_lock import lock, rate_limit

    admits = rate_limit("bench:admits", "1000000/s", burst=1_000_000)
    spent = rate_limit("bench:spent", "1/d")
    spent.reserve(0.0)
    refused = spent.reserve
    for warm in (admits.check, lambda: refused(0.0), lambda: lock("bench:warm").acquire()):
        warm()  # connected, the scripts loaded: outside the clock
    timers = {
        "check": _timed(admits.check),
        "refused": _timed(lambda: refused(0.0)),
        "acquire": _acquires(),
    }
    found = interleaved(timers, cycles, repeats)
    server = redis.Redis.from_url(url)
    locks = [lock(f"bench:counted:{i}", auto_renew=False) for i in range(100)]
    trips = {
        "check": _round_trips(server, [admits.check] * 100),
        "refused": _round_trips(server, [lambda: refused(0.0)] * 100),
        "acquire": _round_trips(server, [held.acquire for held in locks]),
    }
    for held in locks:
        held.release()
    return found, trips


def _round_trips(server: object, attempts: list[object]) -> float:
    """The requests the server read per attempt (INFO's total_reads_processed: one read of
    a client's socket each, a round trip when nothing else talks to the server)."""

    def reads() -> int:
        return int(server.info("stats")["total_reads_processed"])  # type: ignore[attr-defined]

    before = reads()
    for attempt in attempts:
        attempt()  # type: ignore[operator]
    return (reads() - before - 1) / len(attempts)  # the INFO of ``before`` was read too


def fairness(url: str, processes: bool) -> dict[str, float]:
    """Blocking callers at FAIR_RATE for FAIR_SECONDS, in threads or in processes."""
    import redis

    from django_redis_lock import rate_limit

    log = redis.Redis.from_url(url)
    name = f"bench:fair:{'processes' if processes else 'threads'}"
    log.delete("bench:calls")
    start = time.monotonic() + 1.0

    def caller(_: int) -> None:
        limit = rate_limit(name, FAIR_RATE)
        limit.retry_after()  # connected, the scripts loaded: before the start
        rows = []
        time.sleep(max(0.0, start - time.monotonic()))
        while time.monotonic() < start + FAIR_SECONDS:
            sent = time.monotonic()
            turn = limit.reserve(None)
            answered = time.monotonic()
            time.sleep(turn.wait)
            woke, woke_wall = time.monotonic(), time.time()
            rows.append(f"{sent} {answered} {woke} {turn.at} {woke_wall}")
        with redis.Redis.from_url(url) as own:
            own.rpush("bench:calls", *rows)

    if processes:
        forked(FAIR_CALLERS, caller)
    else:
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(FAIR_CALLERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    calls = [tuple(map(float, row.split())) for row in log.lrange("bench:calls", 0, -1)]
    waits = sorted(woke - sent for sent, _, woke, _, _ in calls)
    late = sorted(woke_wall - at for _, _, _, at, woke_wall in calls)
    return {
        "calls": len(calls),
        "out of order": _out_of_order(calls),
        "median wait": statistics.median(waits),
        "worst wait": waits[-1],
        "median late": statistics.median(late),
        "p99 late": statistics.quantiles(late, n=100)[98],
    }


def _out_of_order(calls: list[tuple[float, ...]]) -> int:
    """Calls whose turn came before that of a call answered before they were sent."""
    by_sent = sorted(calls)
    answered = sorted((answered, at) for _, answered, _, at, _ in calls)
    latest_turn, found, j = float("-inf"), 0, 0
    for sent, _, _, at, _ in by_sent:
        while j < len(answered) and answered[j][0] < sent:
            latest_turn = max(latest_turn, answered[j][1])
            j += 1
        found += at <= latest_turn
    return found


def main() -> None:
    """Measure; print the rows for docs/performance.rst."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    server = RedisServer(binary=find_redis_server()).start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    from django.test.utils import override_settings

    from testproject.settings import build_caches

    try:
        with override_settings(CACHES=build_caches(server.url)):
            times, per_attempt = cost(server.url, options.cycles, options.repeats)
            hammered = {
                burst: accuracy(server.url, options.processes, options.seconds, burst)
                for burst in BURSTS
            }
            fair = {
                kind: fairness(server.url, kind == "processes") for kind in ("threads", "processes")
            }
    finally:
        server.stop()
    expected = PER_SECOND * options.seconds
    for burst, (admitted, most, attempts, span) in hammered.items():
        print(
            f"- accuracy, burst {burst}: {options.processes} processes, {attempts:,} "
            f'non-blocking attempts at "{RATE}" for {options.seconds:g} s: {admitted:,} admitted '
            f"({admitted - expected:+.0f} against {expected:,.0f}, target within "
            f"{burst + expected / 100:.0f}; the admissions spanned {span:.3f} s), at most "
            f"{most} in any one-second window of the server's clock (bound "
            f"{PER_SECOND + burst})"
        )
    acquire = times["acquire"]
    print(
        f"- cost: an uncontended check() {times['check']:.0f} µs ({times['check'] / acquire:.2f}x "
        f"an uncontended lock acquire, {acquire:.0f} µs, in the same run), a refused "
        f"reserve(0.0) {times['refused']:.0f} µs ({times['refused'] / acquire:.2f}x); round "
        f"trips per attempt: check {per_attempt['check']:g}, refused "
        f"{per_attempt['refused']:g}, acquire {per_attempt['acquire']:g}"
    )
    for kind, found in fair.items():
        print(
            f'- fairness, {FAIR_CALLERS} {kind} blocking at "{FAIR_RATE}" for '
            f"{FAIR_SECONDS:g} s: {found['calls']:.0f} calls, {found['out of order']:.0f} served "
            f"out of arrival order; wait {found['median wait'] * 1000:.1f} ms at the median, "
            f"{found['worst wait'] * 1000:.1f} ms at worst "
            f"({found['worst wait'] / found['median wait']:.2f}x); woke "
            f"{found['median late'] * 1000:.2f} ms past the turn at the median, "
            f"{found['p99 late'] * 1000:.2f} ms at p99"
        )


if __name__ == "__main__":
    main()
