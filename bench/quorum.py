"""Quorum locks over 1, 3 and 5 independent primaries, beside pottery's Redlock, in one run.

    python3 dev.py bench quorum [--cycles 5000] [--repeats 3] [--down 200]

Starts five redis-servers of its own on loopback. django_redis_lock reaches each through a
cache alias of its own (django-redis, socket timeouts of 0.5 s); pottery's Redlock through a
redis-py client per primary (``Redis.from_url``, the same timeouts). Both take the lease
``peers.LOCK_TIMEOUT``. It measures, every repeat in an order rotated between repeats:

- uncontended ``with lock(name): pass`` cycles, timed one by one in interleaved rounds of the
  six: django_redis_lock on one primary (a plain alias) and on quorums of 3 and 5
  (``using=[...]``), pottery's Redlock acquire + release on 1, 3 and 5 masters. µs per cycle,
  and requests per cycle (``total_reads_processed`` summed over the five primaries);

and then, ``--repeats`` times, with 2 of the 5 primaries killed (SIGKILL): the time of one
acquire on the five (the release untimed), django_redis_lock and pottery in turn, ``--down``
of each; the two are started again (empty) after. Both libraries log a dead primary's errors
(pottery with a traceback per call): their loggers are quieted meanwhile, so that the times
are the locks', not the terminal's.

The primaries are emptied before the kill, and each size has a lock name of its own: pottery's
calls return once a majority answered, and an acquire's late ``SET`` can reach a primary after
the release's compare-and-delete did (seen with ``MONITOR``), leaving the lock held there for
its whole lease; two kills more, or one primary shared with a smaller size, and no majority
could be had until that lease ends.

Medians of the repeats. Prints the rows for docs/benchmarks.rst (reST) and a plain summary.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# peers, first: it puts the project on sys.path and points Django at testproject.settings.
import peers

from testproject.redis_server import RedisServer, RedisServerGroup, find_redis_server

PRIMARIES = 5
SIZES = (1, 3, 5)
DOWN = 2  # primaries killed in the second part (a majority of 5 is left)
SOCKET_TIMEOUT = 0.5
WARM_UP_CYCLES = 200
DOWN_SAMPLES = 200
# No acquire here waits for another holder: one that waits this long (s) fails the run.
ACQUIRE_LIMIT = 5.0

OURS, POTTERY = "django_redis_lock", "pottery Redlock"
# The least any quorum lock does: SET NX PX sent to every primary before any reply is read,
# then a compare-and-delete script the same way; no metadata, no Python lock object.
FLOOR = "raw fan-out floor"
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)

#: A lock of one library, made anew for each cycle as an application does; a context manager
#: that raises when it cannot take the lock within ACQUIRE_LIMIT.
Make = Callable[[], Any]


def caches(servers: list[RedisServer]) -> dict[str, Any]:
    """One django-redis alias per primary ("q0" to "q4"); "default" is "q0"'s settings."""
    found: dict[str, Any] = {
        f"q{i}": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": server.url,
            "OPTIONS": {
                "SOCKET_TIMEOUT": SOCKET_TIMEOUT,
                "SOCKET_CONNECT_TIMEOUT": SOCKET_TIMEOUT,
            },
        }
        for i, server in enumerate(servers)
    }
    found["default"] = found["q0"]
    return found


def _ours(size: int) -> Make:
    from django_redis_lock import lock

    using: str | list[str] = "q0" if size == 1 else [f"q{i}" for i in range(size)]
    return lambda: lock(
        f"quorum:{size}",
        using=using,
        timeout=peers.LOCK_TIMEOUT,
        blocking_timeout=ACQUIRE_LIMIT,
    )


def _pottery(clients: list[Any], size: int) -> Make:
    from pottery import Redlock

    masters = set(clients[:size])
    # A name per size: a lock pottery left held on a primary (see the module's docstring)
    # makes no other size wait for its lease.
    return lambda: Redlock(
        key=f"quorum:{size}",
        masters=masters,
        auto_release_time=peers.LOCK_TIMEOUT,
        context_manager_timeout=ACQUIRE_LIMIT,
    )


def _floor(servers: list[RedisServer], size: int) -> Make:
    import hashlib
    import os

    import redis

    connections = [
        redis.Connection(host=server.host, port=server.port, socket_timeout=SOCKET_TIMEOUT)
        for server in servers[:size]
    ]
    for connection in connections:
        connection.send_command("SCRIPT", "LOAD", _RELEASE)
        connection.read_response()
    sha, key = hashlib.sha1(_RELEASE.encode()).hexdigest(), f"floor:{size}"

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        token = os.urandom(16).hex()
        for connection in connections:
            connection.send_command("SET", key, token, "NX", "PX", peers.LOCK_TIMEOUT * 1000)
        if sum(1 for connection in connections if connection.read_response()) <= size // 2:
            raise RuntimeError(f"{FLOOR}: no majority for {key}")
        try:
            yield
        finally:
            for connection in connections:
                connection.send_command("EVALSHA", sha, 1, key, token)
            for connection in connections:
                connection.read_response()

    return held


def label(library: str, size: int) -> str:
    return f"{library} {size}"


class Primaries:
    """A plain client of each primary: to count the requests they read, and to empty them."""

    def __init__(self, servers: list[RedisServer]) -> None:
        import redis

        self.clients = [redis.Redis.from_url(server.url) for server in servers]

    def reads(self) -> int:
        """Requests read by all primaries, this call's own INFO commands included."""
        return sum(int(client.info("stats")["total_reads_processed"]) for client in self.clients)

    def cpu(self, count: int) -> float:
        """CPU seconds (user and system) the first ``count`` primaries have used so far."""
        return sum(
            float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
            for info in (client.info("cpu") for client in self.clients[:count])
        )

    def flush(self) -> None:
        for client in self.clients:
            client.flushall()


@dataclass
class Cycle:
    micros: float
    requests: float  # per cycle, all primaries together
    slowest: float  # µs
    client_cpu: float  # µs of the client's CPU per cycle
    server_cpu: float  # µs of CPU per cycle, the primaries of the size together


def uncontended(makers: dict[str, Make], primaries: Primaries, cycles: int) -> dict[str, Cycle]:
    """Each lock's median µs per cycle (timed one by one) and requests per cycle."""
    for make in makers.values():  # connections, scripts, imports
        for _ in range(WARM_UP_CYCLES):
            with make():
                pass
    times: dict[str, list[float]] = {name: [] for name in makers}
    requests: dict[str, list[float]] = {name: [] for name in makers}
    client_cpu: dict[str, list[float]] = {name: [] for name in makers}
    server_cpu: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(max(1, cycles // peers.ROUND_CYCLES)):
        for name, make in makers.items():
            size = int(name.rsplit(" ", 1)[1])
            # The servers' CPU is read outside the count of requests: its INFO calls are not
            # the lock's.
            servers_before = primaries.cpu(size)
            before = primaries.reads()
            client_before = time.thread_time()
            for _ in range(peers.ROUND_CYCLES):
                started = time.perf_counter()
                with make():
                    pass
                times[name].append(time.perf_counter() - started)
            client_cpu[name].append((time.thread_time() - client_before) / peers.ROUND_CYCLES)
            infos = len(primaries.clients)  # the second reads()'s own commands
            requests[name].append((primaries.reads() - before - infos) / peers.ROUND_CYCLES)
            server_cpu[name].append((primaries.cpu(size) - servers_before) / peers.ROUND_CYCLES)
    return {
        name: Cycle(
            statistics.median(times[name]) * 1e6,
            statistics.median(requests[name]),
            max(times[name]) * 1e6,
            statistics.median(client_cpu[name]) * 1e6,
            statistics.median(server_cpu[name]) * 1e6,
        )
        for name in makers
    }


@contextlib.contextmanager
def quiet(*names: str) -> Iterator[None]:
    """The loggers ``names`` silent (their records not even made) for a while."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@dataclass
class Down:
    median: float  # µs per acquire
    worst: float


def down(
    makers: dict[str, Make], servers: list[RedisServer], primaries: Primaries, samples: int
) -> dict[str, Down]:
    """The µs of one acquire on all five primaries while ``DOWN`` of them are killed."""
    killed = servers[-DOWN:]
    times: dict[str, list[float]] = {name: [] for name in makers}
    primaries.flush()  # no lock left held on a minority (see the module's docstring)
    with quiet("django_redis_lock", "pottery"):
        for server in killed:
            server.kill()
        try:
            for _ in range(samples):
                for name, make in makers.items():
                    with contextlib.ExitStack() as stack:  # the release, untimed, on leaving
                        started = time.perf_counter()
                        stack.enter_context(make())  # raises when not held in ACQUIRE_LIMIT
                        times[name].append(time.perf_counter() - started)
        finally:
            for server in killed:
                server.start()
    return {
        name: Down(statistics.median(found) * 1e6, max(found) * 1e6)
        for name, found in times.items()
    }


@dataclass
class Results:
    cycles: dict[str, list[Cycle]]
    down: dict[str, list[Down]]
    ping: list[float]


def run(servers: list[RedisServer], cycles: int, repeats: int, samples: int) -> Results:
    """Every lock, ``repeats`` times in rotated order; then the killed primaries' part."""
    import redis

    primaries = Primaries(servers)
    # from_url, as pottery's documentation makes its masters: a client without a retry policy,
    # so a refused connection fails at once. (``redis.Redis(host, port)`` of redis-py 6 and
    # later retries a refused connection, with backoff, for seconds.)
    clients = [
        redis.Redis.from_url(
            server.url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        for server in servers
    ]
    makers = {label(OURS, size): _ours(size) for size in SIZES}
    makers |= {label(POTTERY, size): _pottery(clients, size) for size in SIZES}
    makers |= {label(FLOOR, size): _floor(servers, size) for size in SIZES}
    results = Results({name: [] for name in makers}, {OURS: [], POTTERY: []}, [])
    order = list(makers)
    for repeat in range(repeats):
        rotated = order[repeat % len(order) :] + order[: repeat % len(order)]
        results.ping.append(peers.ping_seconds(servers[0].url))
        print(f"quorum repeat {repeat + 1}: uncontended", file=sys.stderr, flush=True)
        found = uncontended({name: makers[name] for name in rotated}, primaries, cycles)
        for name, cycle in found.items():
            results.cycles[name].append(cycle)
    # Last: django_redis_lock skips a primary for a moment after it failed, so no uncontended
    # cycle on the five is timed after a kill.
    everyone = {OURS: makers[label(OURS, PRIMARIES)], POTTERY: makers[label(POTTERY, PRIMARIES)]}
    for repeat in range(repeats):
        print(f"quorum repeat {repeat + 1}: {DOWN} primaries down", file=sys.stderr, flush=True)
        turns = dict(reversed(everyone.items())) if repeat % 2 else everyone
        for name, outcome in down(turns, servers, primaries, samples).items():
            results.down[name].append(outcome)
    return results


def measure(
    cycles: int, repeats: int, samples: int = DOWN_SAMPLES
) -> tuple[list[str], str, dict[int, float], dict[int, float]]:
    """Rows for docs/benchmarks.rst, a plain summary, our cycle on each size against ours on
    one primary, and the best that ratio could be: our single cycle plus the raw fan-out
    floor's cost of the primaries beyond the first."""
    """The figures: README-ready sentences, and a plain summary."""
    import django
    from django.test.utils import override_settings

    django.setup()
    group = RedisServerGroup(binary=find_redis_server())
    try:
        servers = [group() for _ in range(PRIMARIES)]
        with override_settings(CACHES=caches(servers), REDIS_LOCK={"CACHE": "default"}):
            results = run(servers, cycles, repeats, samples)
    finally:
        group.stop_all()
    one = _micros(results, OURS, 1)
    ratios = {size: _micros(results, OURS, size) / one for size in SIZES}
    # The best our ratio could be: our single cycle plus what the floor pays for the primaries
    # beyond the first (its per-primary work, which does not overlap here).
    extra = {size: _micros(results, FLOOR, size) - _micros(results, FLOOR, 1) for size in SIZES}
    bound = {size: (one + extra[size]) / one for size in SIZES}
    return rows(results), summary(results), ratios, bound


def _micros(results: Results, library: str, size: int) -> float:
    return statistics.median(cycle.micros for cycle in results.cycles[label(library, size)])


def _cpu(results: Results, library: str, size: int) -> tuple[float, float]:
    """The client's and the primaries' CPU per cycle (µs), medians of the repeats."""
    found = results.cycles[label(library, size)]
    return (
        statistics.median(cycle.client_cpu for cycle in found),
        statistics.median(cycle.server_cpu for cycle in found),
    )


def _requests(results: Results, library: str, size: int) -> float:
    return statistics.median(cycle.requests for cycle in results.cycles[label(library, size)])


def _down(results: Results, library: str) -> tuple[float, float]:
    found = results.down[library]
    return (
        statistics.median(outcome.median for outcome in found),
        statistics.median(outcome.worst for outcome in found),
    )


def rows(results: Results) -> list[str]:
    """Rows for docs/benchmarks.rst."""
    ours = {size: _micros(results, OURS, size) for size in SIZES}
    theirs = {size: _micros(results, POTTERY, size) for size in SIZES}
    floor = {size: _micros(results, FLOOR, size) for size in SIZES}
    floor_requests = {size: _requests(results, FLOOR, size) for size in SIZES}
    ours_requests = {size: _requests(results, OURS, size) for size in SIZES}
    their_requests = {size: _requests(results, POTTERY, size) for size in SIZES}
    rtt = statistics.median(results.ping) * 1e6
    ours_down, ours_worst = _down(results, OURS)
    theirs_down, their_worst = _down(results, POTTERY)

    def sizes(cycles: dict[int, float], requests: dict[int, float]) -> str:
        return ", ".join(
            f"{cycles[size]:.0f} ({cycles[size] / cycles[1]:.2f}x; {requests[size]:.2f})"
            for size in SIZES
        )

    return [
        "uncontended acquire + release on 1, 3 and 5 primaries, µs per cycle (vs the same "
        "library on one primary; requests per cycle, all primaries together; a ``PING`` takes "
        f"{rtt:.0f} µs): django_redis_lock {sizes(ours, ours_requests)}; pottery's ``Redlock`` "
        f"{sizes(theirs, their_requests)}. django_redis_lock sends each step to every primary "
        "before it reads any reply, so a quorum's cycle costs about one round trip of the "
        "slowest primary per step; pottery starts a thread pool per call",
        f"the {FLOOR} (``SET NX PX`` sent to every primary before any reply is read, then a "
        "compare-and-delete script the same way, on a connection per primary: the least a "
        f"quorum lock sends, with nothing else): {sizes(floor, floor_requests)}; on two cores "
        "shared by the client and the primaries, the primaries' work does not overlap",
        "where a cycle's time goes: the client's CPU and the primaries' (together), µs per "
        "cycle, on 1, 3 and 5 primaries (``time.thread_time`` in the client, the servers' "
        f"``used_cpu_user`` and ``used_cpu_sys``): the {FLOOR} {_cpus(results, FLOOR)}; "
        f"django_redis_lock {_cpus(results, OURS)}. Two cores run the client and the "
        "primaries, so a cycle takes at least half the CPU it uses, and at least the client's",
        "django_redis_lock against pottery at the same size: "
        + ", ".join(
            f"{ours[size] / theirs[size]:.2f}x on {size} primar{'y' if size == 1 else 'ies'}"
            for size in SIZES
        )
        + " of pottery's time",
        f"with {DOWN} of {PRIMARIES} primaries killed (SIGKILL; their connections are refused "
        f"at once), one acquire on the {PRIMARIES}, median (slowest): django_redis_lock "
        f"{ours_down:,.0f} µs ({ours_worst / 1000:,.1f} ms), pottery {theirs_down:,.0f} µs "
        f"({their_worst / 1000:,.1f} ms); socket timeouts of {SOCKET_TIMEOUT} s in both. "
        "django_redis_lock skips a primary that failed for a second (while the others can make "
        "a majority without it); pottery returns once a majority granted, leaving the calls "
        "to the dead primaries to its pool's threads",
    ]


def _cpus(results: Results, library: str) -> str:
    return ", ".join("{:.0f} + {:.0f}".format(*_cpu(results, library, size)) for size in SIZES)


def summary(results: Results) -> str:
    """The same figures as a plain table, and the target of issue 13."""
    lines = [
        f"{'':28} {'µs/cycle':>9} {'x own 1':>8} {'requests':>9} {'slowest ms':>11} "
        f"{'client CPU':>11} {'servers CPU':>12}"
    ]
    for library in (OURS, POTTERY, FLOOR):
        one = _micros(results, library, 1)
        for size in SIZES:
            micros = _micros(results, library, size)
            found = results.cycles[label(library, size)]
            requests = statistics.median(cycle.requests for cycle in found)
            slowest = statistics.median(cycle.slowest for cycle in found) / 1000
            client, server = _cpu(results, library, size)
            lines.append(
                f"{label(library, size):28} {micros:9.0f} {micros / one:7.2f}x {requests:9.2f} "
                f"{slowest:11.1f} {client:11.0f} {server:12.0f}"
            )
    for size in SIZES:
        ratio = _micros(results, OURS, size) / _micros(results, POTTERY, size)
        lines.append(f"ours / pottery on {size}: {ratio:.2f}x")
    target = _micros(results, OURS, 3) / _micros(results, OURS, 1)
    lines.append(
        f"target: ours 3 / ours 1 <= 1.30x: {target:.2f}x, {'met' if target <= 1.3 else 'missed'}"
    )
    for library in (OURS, POTTERY):
        median, worst = _down(results, library)
        lines.append(
            f"{library}, {DOWN} of {PRIMARIES} down: acquire {median:,.0f} µs median, "
            f"{worst / 1000:,.1f} ms worst"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000, help="uncontended cycles")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--down", type=int, default=DOWN_SAMPLES, help="acquires with primaries down"
    )
    options = parser.parse_args()
    started = time.monotonic()
    found, plain, _, _ = measure(options.cycles, options.repeats, options.down)
    print("Quorum locks (Redlock)")
    print("----------------------")
    print()
    print(f"From bench/quorum.py, on {PRIMARIES} primaries of its own:")
    print()
    for row in found:
        print(f"- {row}")
    print()
    print(plain)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
