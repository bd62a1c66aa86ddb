"""What a rate limit must do on every topology, written once: each topology's test module
(tests/backends/) runs it on its own servers, sync and async (the ``driver`` fixture).

Turns are compared on the server's clock, in whole microseconds (``Turn.at``): the window
of a rate is the server's, not the client's."""

from __future__ import annotations

import itertools
import time
from typing import Any

from django_redis_lock import RateLimit, Turn, rate_limit
from tests.helpers import start

#: The scenarios' rate: an interval of 0.5 s, long beside a round trip even on a loaded machine.
RATE, BURST, INTERVAL_US = "2/s", 2, 500_000


def at_us(turn: Turn) -> int:
    """When a turn comes, in whole microseconds of the server's clock."""
    return round(turn.at * 1_000_000)


def admits_rate_and_burst_then_refuses(driver: Any, name: str = "topology") -> None:
    """burst + 1 calls at once, then one a turn: rate + burst turns in the second from the
    first call, the next ones after it; the turns go in calling order, and a blocking call
    sleeps until its own."""
    limit = rate_limit(name, RATE, burst=BURST)
    at_once = [driver.call(limit, "reserve", 0.0) for _ in range(BURST + 2)]
    assert [turn.admitted for turn in at_once] == [True] * (BURST + 1) + [False]
    assert 0 < at_once[-1].retry_after <= INTERVAL_US / 1e6
    assert 0 <= driver.call(limit, "retry_after") <= INTERVAL_US / 1e6
    first = at_us(at_once[0])
    # The first call that waits gets the turn the burst left: an interval after the first
    # call, the last of the second from it (burst + 1 and this one: rate + burst).
    later = driver.call(limit, "reserve", 2.0)
    assert later.admitted
    assert at_us(later) - first == INTERVAL_US
    asked = time.monotonic()
    assert driver.call(limit, "acquire", True, 5.0)  # the turn at 1.0 s, slept until
    assert 0.4 < time.monotonic() - asked < 2.5
    # The acquire's turn was the first past the second; the following one is an interval on.
    following = driver.call(limit, "reserve", None)
    assert at_us(following) - first == 3 * INTERVAL_US
    assert not driver.call(limit, "reserve", 0.0).admitted


def waiters_get_distinct_turns_in_order(driver: Any, name: str = "topology:queue") -> None:
    """Callers that block at once, from several threads: each gets a turn of its own, the
    turns one interval apart without a gap (handed out as the calls arrived), and each
    returns no sooner than its turn."""
    limit = rate_limit(name, "10/s")
    # Half a second of turns taken first: every thread's call reaches the server before its
    # turn, even on a loaded machine (a call that comes after its turn is admitted then).
    ahead = [driver.call(limit, "reserve", None) for _ in range(5)]

    def wait_for_turn(limit: RateLimit = limit) -> tuple[Turn, float]:
        turn = driver.call(limit, "reserve", None)
        time.sleep(turn.wait)  # what acquire() does: shown apart, to compare with the turn
        return turn, time.time()

    waiting = [start(wait_for_turn) for _ in range(6)]
    turns = sorted((future.result(10) for future in waiting), key=lambda found: found[0].at)
    starts = [at_us(ahead[-1]), *(at_us(turn) for turn, _ in turns)]
    assert [b - a for a, b in itertools.pairwise(starts)] == [100_000] * 6
    assert all(turn.admitted and turn.wait > 0 for turn, _ in turns)
    # The client's clock may differ a little from the server's; loopback, a few ms at most.
    assert all(done >= turn.at - 0.01 for turn, done in turns)


def with_blocks_wait_for_a_turn(driver: Any, name: str = "topology:with") -> None:
    """``with`` / ``async with`` take a turn, waiting for it."""
    limit = rate_limit(name, "10/s")
    with driver.entered(limit):
        pass
    started = time.monotonic()
    with driver.entered(limit):
        pass
    assert time.monotonic() - started >= 0.05  # most of an interval, by the client's clock
