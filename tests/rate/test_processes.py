"""A rate shared by real processes: what they are admitted together stays within the rate in
every window of the server's clock, and processes that block share the turns without a gap
or a double."""

from __future__ import annotations

import itertools
import time

import redis

from django_redis_lock import rate_limit
from django_redis_lock.backends.base import text_of
from tests.helpers import PATIENT_SECONDS, spawn_child, wait_children

PROCESSES = 6
RATE, CALLS_PER_SECOND, BURST = "50/s", 50, 5
HAMMER_SECONDS = 1.5


def _hammer(url: str, seconds: float) -> None:
    """Non-blocking attempts for ``seconds``: the server's time of each, and its answer, logged."""
    limit = rate_limit("shared", RATE, burst=BURST)
    attempts = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        turn = limit.reserve(0.0)
        attempts.append(f"{round(turn.at * 1_000_000)}:{int(turn.admitted)}")
    with redis.Redis.from_url(url, socket_timeout=PATIENT_SECONDS) as client:
        client.rpush("attempts", *attempts)


def conforming(attempts: list[tuple[int, bool]]) -> list[str]:
    """Where ``attempts`` (server time in microseconds, admitted) differ from the cell rate
    algorithm run over them in the server's order: a call refused while its turn had come, or
    admitted before it. A call within a microsecond or two of its turn is not judged (the
    times went through seconds as floats)."""
    interval, slack = 1_000_000 // CALLS_PER_SECOND, 2
    wrong, tat = [], 0
    # The same microsecond: the admissions ran first (a refusal changes nothing).
    for moment, admitted in sorted(attempts, key=lambda attempt: (attempt[0], not attempt[1])):
        tat = max(tat, moment)
        early = tat - BURST * interval - moment
        if (admitted and early > slack) or (not admitted and early < -slack):
            wrong.append(f"{'admitted' if admitted else 'refused'} at {moment}, {early} us early")
        if admitted:
            tat += interval
    return wrong


def most_in_a_window(times_us: list[int], window_us: int) -> int:
    """The most of ``times_us`` (sorted) in any half-open window of ``window_us``."""
    most, first = 0, 0
    for last, moment in enumerate(times_us):
        while moment - times_us[first] >= window_us:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_processes_hammering_one_rate_are_admitted_within_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    pids = [spawn_child(_hammer, redis_url, HAMMER_SECONDS) for _ in range(PROCESSES)]
    assert wait_children(pids) == [0] * PROCESSES
    logged = [text_of(each).split(":") for each in redis_client.lrange("attempts", 0, -1)]
    attempts = [(int(moment), admitted == "1") for moment, admitted in logged]
    # Every call decided as the algorithm decides it: none refused while a turn was free,
    # none admitted early, however busy the machine kept the processes.
    assert conforming(attempts) == []
    times = sorted(moment for moment, admitted in attempts if admitted)
    assert len(times) < len(attempts)  # the rate was contended
    assert most_in_a_window(times, 1_000_000) <= CALLS_PER_SECOND + BURST
    span = (times[-1] - times[0]) / 1e6  # the children start at different times
    assert len(times) <= CALLS_PER_SECOND * span + BURST + 1


def test_conforming_finds_a_refusal_with_a_free_turn_and_an_early_admission() -> None:
    interval = 1_000_000 // CALLS_PER_SECOND
    burst = [(0, True)] * (BURST + 1) + [(1, False)]
    assert conforming([*burst, (interval, True)]) == []
    assert len(conforming([*burst, (interval + 10, False)])) == 1
    assert len(conforming([*burst, (interval - 10, True)])) == 1


def test_most_in_a_window_counts_a_half_open_window() -> None:
    assert most_in_a_window([0, 10, 20, 30], 20) == 2
    assert most_in_a_window([0, 10, 19, 30], 20) == 3


def _wait_turns(url: str, calls: int) -> None:
    limit = rate_limit("queued", "100/s")
    turns = []
    for _ in range(calls):
        turn = limit.reserve(None)
        time.sleep(turn.wait)
        turns.append(f"{round(turn.at * 1_000_000)}")
    with redis.Redis.from_url(url, socket_timeout=PATIENT_SECONDS) as client:
        client.rpush("turns", *turns)


def test_blocking_processes_share_the_turns_one_interval_apart(
    redis_url: str, redis_client: redis.Redis
) -> None:
    pids = [spawn_child(_wait_turns, redis_url, 10) for _ in range(PROCESSES)]
    assert wait_children(pids) == [0] * PROCESSES
    times = sorted(int(t) for t in redis_client.lrange("turns", 0, -1))
    assert len(times) == len(set(times)) == PROCESSES * 10
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # One interval apart while calls waited; more only where no process was asking.
    assert min(gaps) == 10_000
