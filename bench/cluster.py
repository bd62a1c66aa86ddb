"""django_redis_lock on a Redis Cluster, beside redis-py's Lock and a raw floor, in one run.

    python3 dev.py bench cluster [--cycles 5000] [--contended 50] [--repeats 3]
                                 [--wake-up-repeats 5]

Starts its own cluster (three primaries with a replica each, on loopback: testproject/cluster.py)
and measures, every repeat running all libraries in an order rotated between repeats:

- uncontended acquire + release cycles on one free lock, timed one by one in interleaved rounds:
  µs per cycle against the raw floor (SET NX PX, then a compare-and-delete script) and round
  trips per cycle (``total_reads_processed`` summed over the primaries). The raw floor and
  redis-py's ``Lock`` run on redis-py's ``RedisCluster``; django_redis_lock on the
  ``ClusterValkeyCache`` alias, whose client is valkey-py's ``ValkeyCluster``;
- the contended handoff gap, as bench/peers.py measures it (from a holder calling ``release()``
  to a waiting process's ``acquire()`` returning), 4 processes on one lock, for
  django_redis_lock and redis-py's ``Lock`` (which polls). Few cycles by default: redis-py's
  waiters sleep between tries.

Then (bench/cluster_wakeups.py, on clusters of 3 and of 6 primaries and a lone redis-server of
its own) the cluster bus's pub/sub messages per hand-over with classic and sharded wake-ups,
the hand-over against one server's, and the throughput of locks spread over the primaries.

Medians of the repeats. ``bench/peers.py --write`` puts these rows in docs/benchmarks.rst.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# cluster_wakeups imports peers first: peers puts the project on sys.path and points Django at
# testproject.settings.
import cluster_wakeups
import peers
from peers import Handle, Library

from testproject.cluster import ClusterTopology
from testproject.redis_server import RedisServer

CONTENDED_CYCLES = 50
WARM_UP_CYCLES = 200
COMPARE_AND_DELETE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _cluster_client(url: str) -> Any:
    from redis.cluster import RedisCluster

    return RedisCluster.from_url(url)


class RawFloor(Handle):
    """SET NX PX, then a compare-and-delete script: what any lock must send at the least."""

    def __init__(self, client: Any, release: Any, name: str) -> None:
        self.client, self.release_script, self.name = client, release, name
        self.token = os.urandom(16).hex()

    def acquire(self) -> bool:
        lease = peers.LOCK_TIMEOUT * 1000
        return bool(self.client.set(self.name, self.token, nx=True, px=lease))

    def release(self) -> None:
        self.release_script(keys=[self.name], args=[self.token])


def _raw(url: str) -> Callable[[str], Handle]:
    client = _cluster_client(url)
    release = client.register_script(COMPARE_AND_DELETE)
    return lambda name: RawFloor(client, release, name)


def _redis_py(url: str) -> Callable[[str], Handle]:
    client = _cluster_client(url)
    return lambda name: client.lock(name, timeout=peers.LOCK_TIMEOUT)


NAMES = ("raw floor", "redis-py Lock", "django_redis_lock")


def libraries(url: str) -> list[Library]:
    """The three, each reaching the cluster of ``url`` (django_redis_lock through the "default"
    cache alias). peers.contended hands a library the URL of its counter's node: not needed."""
    return [
        Library(NAMES[0], False, lambda *_: _raw(url)),
        Library(NAMES[1], True, lambda *_: _redis_py(url)),
        Library(NAMES[2], True, peers._ours),
    ]


def cluster_caches(url: str) -> dict[str, Any]:
    """The "default" alias on the cluster, as the documentation configures a ClusterValkeyCache."""
    return {
        "default": {
            "BACKEND": "django_valkey.cluster_cache.cache.ClusterValkeyCache",
            "LOCATION": url.replace("redis://", "valkey://"),
            "OPTIONS": {"BASE_CLIENT_KWARGS": {"socket_timeout": 2, "socket_connect_timeout": 2}},
        }
    }


class Primaries:
    """A plain client of each primary: to count reads and to empty them between runs."""

    def __init__(self, servers: list[RedisServer]) -> None:
        import redis

        self.clients = [redis.Redis(server.host, server.port) for server in servers]

    def reads(self) -> int:
        """Reads processed by all primaries, this call's own INFO commands included."""
        return sum(int(c.info("stats")["total_reads_processed"]) for c in self.clients)

    def flush(self) -> None:
        for client in self.clients:
            client.flushall()


def uncontended(
    factories: dict[str, Callable[[str], Handle]], primaries: Primaries, cycles: int
) -> dict[str, peers.Uncontended]:
    """Each library's median µs per cycle and round trips per cycle, in interleaved rounds."""
    for make in factories.values():  # connections, scripts, slot maps
        for _ in range(WARM_UP_CYCLES):
            handle = make("uncontended")
            handle.acquire()
            handle.release()
    times: dict[str, list[float]] = {name: [] for name in factories}
    trips: dict[str, list[float]] = {name: [] for name in factories}
    for _ in range(max(1, cycles // peers.ROUND_CYCLES)):
        for name, make in factories.items():
            before = primaries.reads()
            for _ in range(peers.ROUND_CYCLES):
                started = time.perf_counter()
                handle = make("uncontended")
                handle.acquire()
                handle.release()
                times[name].append(time.perf_counter() - started)
            infos = len(primaries.clients)  # the second reads()'s own commands
            trips[name].append((primaries.reads() - before - infos) / peers.ROUND_CYCLES)
    return {
        name: peers.Uncontended(
            statistics.median(times[name]) * 1e6, statistics.median(trips[name])
        )
        for name in factories
    }


def run(
    topology: ClusterTopology, cycles: int, contended: int, repeats: int
) -> tuple[dict[str, list[peers.Uncontended]], dict[str, list[peers.Contended]], list[float]]:
    """Every library, ``repeats`` times in rotated order: uncontended, contended, PING times."""
    everyone = libraries(topology.url)
    primaries = Primaries(topology.primaries())
    counter_url = topology.primary_of("counter").url  # peers.contended's counter, a plain key
    quiet: dict[str, list[peers.Uncontended]] = {}
    fought: dict[str, list[peers.Contended]] = {}
    pings: list[float] = []
    made = {library.name: library.make(topology.url, "") for library in everyone}
    for repeat in range(repeats):
        order = everyone[repeat % len(everyone) :] + everyone[: repeat % len(everyone)]
        primaries.flush()
        pings.append(peers.ping_seconds(counter_url))
        print(f"cluster repeat {repeat + 1}: uncontended", file=sys.stderr, flush=True)
        factories = {library.name: made[library.name] for library in order}
        for name, cycle in uncontended(factories, primaries, cycles).items():
            quiet.setdefault(name, []).append(cycle)
        for library in (library for library in order if library.contended):
            primaries.flush()
            print(f"cluster repeat {repeat + 1}: {library.name}", file=sys.stderr, flush=True)
            fight = peers.contended(library, counter_url, contended)
            if not fight.exact:
                raise SystemExit(f"{library.name}: the counter is wrong: no mutual exclusion")
            fought.setdefault(library.name, []).append(fight)
    return quiet, fought, pings


def measure(
    cycles: int, repeats: int, contended: int = CONTENDED_CYCLES, wake_up_repeats: int = 5
) -> list[str]:
    """The figures, as README-ready sentences."""
    import django
    from django.test.utils import override_settings

    django.setup()
    with ClusterTopology() as topology, override_settings(CACHES=cluster_caches(topology.url)):
        quiet, fought, pings = run(topology, cycles, contended, repeats)
        sleep = _cluster_client(topology.url).lock("sleep").sleep

    def median(runs: list[Any], field: str) -> float:
        return float(statistics.median(getattr(outcome, field) for outcome in runs))

    floor, redis_py, ours = (median(quiet[name], "micros") for name in NAMES)
    floor_trips, redis_py_trips, ours_trips = (median(quiet[name], "trips") for name in NAMES)
    rtt = statistics.median(pings) * 1e6
    redis_py_gap, ours_gap = (median(fought[name], "gap_p50") for name in NAMES[1:])
    redis_py_worst, ours_worst = (median(fought[name], "wait_max") for name in NAMES[1:])
    return [
        "uncontended acquire + release, µs per cycle (vs the raw floor; round trips per cycle): "
        f"django_redis_lock through a ``ClusterValkeyCache`` alias {ours:.0f} "
        f"({ours / floor:.2f}x; {ours_trips:.2f}), redis-py's ``Lock`` on a ``RedisCluster`` "
        f"client {redis_py:.0f} ({redis_py / floor:.2f}x; {redis_py_trips:.2f}), the raw floor "
        "(``SET NX PX``, then a compare-and-delete script, on that ``RedisCluster`` client) "
        f"{floor:.0f} ({floor_trips:.2f}); the cache's client is valkey-py's ``ValkeyCluster``",
        f"contended, {peers.PROCESSES} processes on one lock ({contended} cycles each; a ``PING`` "
        f"to a primary takes {rtt:.0f} µs): the handoff gap p50 is {ours_gap:,.0f} µs "
        f"({ours_gap / rtt:.2f} round trips) with django_redis_lock, whose release script hands "
        "the lock over and publishes the grant (with sharded pub/sub, on Redis 7+: to the "
        "lock's shard, where the waiting process listens), and "
        f"{redis_py_gap:,.0f} µs with redis-py's ``Lock``, "
        f"which polls (every {sleep} s by default); worst acquire wait "
        f"{ours_worst / 1000:,.1f} ms and {redis_py_worst / 1000:,.1f} ms",
        *cluster_wakeups.measure(cluster_caches, wake_up_repeats),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000, help="uncontended cycles")
    parser.add_argument("--contended", type=int, default=CONTENDED_CYCLES, help="per process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wake-up-repeats", type=int, default=5, help="bench/cluster_wakeups.py")
    options = parser.parse_args()
    rows = measure(options.cycles, options.repeats, options.contended, options.wake_up_repeats)
    for row in rows:
        print(f"- {row}")


if __name__ == "__main__":
    main()
