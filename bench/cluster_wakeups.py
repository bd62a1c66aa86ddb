"""Wake-ups and spread on clusters of 3 and of 6 primaries, beside one redis-server, in one run.

Part of ``python3 dev.py bench cluster`` (bench/cluster.py adds these rows to its own). It
starts a cluster of 3 and one of 6 primaries (a replica each) and a lone redis-server (with a
replica, as each shard has), all at once, and every repeat runs each measurement on each of
them, in an order rotated between repeats, with django_redis_lock and its defaults:

- the contended hand-over (bench/peers.py's ``contended``: 4 processes on one lock, from a
  holder calling ``release()`` to a waiting process's ``acquire()`` returning) on each cluster
  with sharded wake-ups (the default on Redis 7+) and with classic ones
  (``REDIS_LOCK["CLUSTER_WAKE_UPS"] = "classic"``), and on the lone server;
- the pub/sub messages the nodes send each other over the cluster bus during those runs
  (``CLUSTER INFO``'s ``cluster_stats_messages_publish_sent`` and
  ``..._publishshard_sent``, summed over every node) per grant published (the primaries'
  ``PUBLISH`` and ``SPUBLISH`` calls, scripts' included, from ``INFO commandstats``): a
  hand-over publishes one grant;
- the throughput of independent locks: :data:`CYCLERS` processes for
  :data:`CYCLING_SECONDS`, each cycling acquire + release over names of its own, one on each
  primary, so that every primary serves its share; total cycles per second, and each
  primary's CPU (``INFO cpu``) over the run.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

# peers, first: it puts the project on sys.path and points Django at testproject.settings.
import peers

from testproject.cluster import ClusterTopology, info_cluster
from testproject.redis_server import RedisServer, find_redis_server

SIZES = (3, 6)
# Contended cycles per process, in each run.
HAND_OVER_CYCLES = 100
# Two processes per core of the machine this was written for (2 cores, which the servers
# share): enough to keep both busy while each waits for its replies.
CYCLERS = 4
CYCLING_SECONDS = 2.0
ONE_SERVER = "one server"
OURS = peers.Library(peers.OURS, True, peers._ours)


def _client(server: RedisServer) -> Any:
    import redis

    return redis.Redis(server.host, server.port)


@dataclass
class Place:
    """Where one run goes: the caches that reach it, its primaries, all its nodes."""

    name: str
    caches: dict[str, Any]
    primaries: list[RedisServer]
    nodes: list[RedisServer]
    counter_url: str  # peers.contended's counter: a plain key, on the primary that owns it
    primary_of: Callable[[str | bytes], RedisServer]  # the primary of a key

    def bus(self) -> int:
        """Pub/sub messages the nodes sent each other over the cluster bus so far."""
        fields = ("cluster_stats_messages_publish_sent", "cluster_stats_messages_publishshard_sent")
        if len(self.primaries) == 1:
            return 0
        return sum(int(info_cluster(node).get(f, 0)) for node in self.nodes for f in fields)

    def grants(self) -> int:
        """PUBLISH and SPUBLISH calls on the primaries so far, those of scripts included."""
        total = 0
        for server in self.primaries:
            stats = _client(server).info("commandstats")
            total += sum(
                int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("publish", "spublish")
            )
        return total

    def cpu(self) -> list[float]:
        """Each node's CPU so far, in seconds (user and system); the primaries' first."""
        found = []
        replicas = [node for node in self.nodes if node not in self.primaries]
        for server in self.primaries + replicas:
            cpu = _client(server).info("cpu")
            found.append(float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
        return found


@contextmanager
def places(cluster_caches: Callable[[str], dict[str, Any]]) -> Iterator[list[Place]]:
    """The lone server and the clusters of :data:`SIZES` primaries, started and stopped. The
    lone server has a replica, as each shard of the clusters has: every write costs the same
    replication in both."""
    with ExitStack() as stack:
        binary = find_redis_server()
        server = RedisServer(binary=binary).start()
        stack.callback(server.stop)
        replica = RedisServer.replica(server.host, server.port, binary=binary).start()
        stack.callback(replica.stop)
        replica.wait_until_synced()
        caches = cluster_caches(server.url)  # then the same client library, on one server:
        caches["default"]["BACKEND"] = "django_valkey.cache.ValkeyCache"
        nodes = [server, replica]
        found = [Place(ONE_SERVER, caches, [server], nodes, server.url, lambda _: server)]
        for size in SIZES:
            topology = stack.enter_context(ClusterTopology(primaries=size, replicas=1))
            caches, counter = cluster_caches(topology.url), topology.primary_of("counter").url
            primaries, nodes = topology.primaries(), list(topology.servers)
            owner = topology.primary_of
            found.append(Place(f"{size} primaries", caches, primaries, nodes, counter, owner))
        yield found


@dataclass
class HandOvers:
    gap_p50: float  # µs
    bus: int  # cluster bus pub/sub messages during the run
    grants: int  # grants published during the run


def hand_overs(place: Place, cycles: int, classic: bool = False) -> HandOvers:
    """peers.contended's run of django_redis_lock on ``place``, with what the bus carried."""
    from django.test.utils import override_settings

    wake_ups = {"CLUSTER_WAKE_UPS": "classic"} if classic else {}
    with override_settings(CACHES=place.caches, REDIS_LOCK=wake_ups):
        bus, grants = place.bus(), place.grants()
        fight = peers.contended(OURS, place.counter_url, cycles)
        if not fight.exact:
            raise SystemExit(f"{place.name}: the counter is wrong: no mutual exclusion")
        return HandOvers(fight.gap_p50, place.bus() - bus, place.grants() - grants)


def spread(place: Place, prefix: str) -> list[str]:
    """Lock names, one whose keys live on each primary of ``place``."""
    from django_redis_lock.runtime import runtime

    backend = runtime().backend()
    found: dict[int, str] = {}
    for i in range(10_000):
        name = f"{prefix}{i}"
        found.setdefault(place.primary_of(backend.keys_for(name).lock).port, name)
        if len(found) == len(place.primaries):
            return sorted(found.values())
    raise RuntimeError(f"no names found on every primary of {place.name}")


def _cycler(names: list[str], seconds: float, barrier: Any, out: Any) -> None:
    made = peers._ours("", "")

    def cycle() -> None:
        for name in names:
            handle = made(name)
            handle.acquire()
            handle.release()

    cycle()  # connections, scripts, slot maps
    barrier.wait(peers.CHILD_SECONDS)
    cycles, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        cycle()
        cycles += len(names)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    barrier.wait(peers.CHILD_SECONDS)  # none exits while others still measure
    out.send((cycles, elapsed, cpu))
    out.close()


# Uncontended acquire + release cycles timed for release_micros.
RELEASES = 1000


def release_micros(place: Place, count: int = RELEASES) -> float:
    """Median µs of an uncontended ``release()`` call alone: the holder's part of a hand-over
    before its script runs (on a cluster, through the cluster client)."""
    from django.test.utils import override_settings

    with override_settings(CACHES=place.caches):
        made, names, times = peers._ours("", ""), spread(place, "release:"), []
        for number in range(count):
            handle = made(names[number % len(names)])
            handle.acquire()
            started = time.perf_counter()
            handle.release()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


@dataclass
class Throughput:
    per_second: float
    shares: list[float]  # each primary's share of the primaries' CPU over the run
    client_cpu: float  # µs of the client processes' CPU per cycle (all their threads)
    server_cpu: float  # µs of the servers' CPU per cycle (primaries and replicas)


def throughput(place: Place, seconds: float = CYCLING_SECONDS) -> Throughput:
    """:data:`CYCLERS` processes cycling their own locks, spread over the primaries."""
    from django.test.utils import override_settings

    with override_settings(CACHES=place.caches):
        context = multiprocessing.get_context("fork")
        barrier = context.Barrier(CYCLERS + 1)
        pipes, processes = [], []
        for number in range(CYCLERS):
            receive, send = context.Pipe(duplex=False)
            names = spread(place, f"spread:{number}:")
            process = context.Process(target=_cycler, args=(names, seconds, barrier, send))
            process.start()
            pipes.append(receive)
            processes.append(process)
        barrier.wait(peers.CHILD_SECONDS)
        before = place.cpu()
        barrier.wait(peers.CHILD_SECONDS)
        after = place.cpu()
        sent = [pipe.recv() for pipe in pipes]
        for process in processes:
            process.join(60)
    cycles = sum(cycles for cycles, _, _ in sent)
    used = [end - start for start, end in zip(before, after, strict=True)]
    primaries = used[: len(place.primaries)]
    return Throughput(
        per_second=sum(cycles / elapsed for cycles, elapsed, _ in sent),
        shares=[share / sum(primaries) for share in primaries],
        client_cpu=sum(cpu for _, _, cpu in sent) / cycles * 1e6,
        server_cpu=sum(used) / cycles * 1e6,
    )


@dataclass
class Found:
    """Every repeat's outcome, by place (and for hand-overs, "classic" or "sharded")."""

    hand_overs: dict[tuple[str, str], list[HandOvers]]
    throughputs: dict[str, list[Throughput]]
    releases: dict[str, list[float]]


def run(
    cluster_caches: Callable[[str], dict[str, Any]], repeats: int, cycles: int = HAND_OVER_CYCLES
) -> Found:
    """Each measurement on each place, ``repeats`` times, the places' order rotated."""
    found = Found({}, {}, {})
    with places(cluster_caches) as everywhere:
        for repeat in range(repeats):
            turn = repeat % len(everywhere)
            for place in everywhere[turn:] + everywhere[:turn]:
                print(f"wake-ups repeat {repeat + 1}: {place.name}", file=sys.stderr, flush=True)
                ways = ("sharded", "classic") if len(place.primaries) > 1 else ("sharded",)
                for way in ways[repeat % len(ways) :] + ways[: repeat % len(ways)]:
                    outcome = hand_overs(place, cycles, classic=way == "classic")
                    found.hand_overs.setdefault((place.name, way), []).append(outcome)
                found.throughputs.setdefault(place.name, []).append(throughput(place))
                found.releases.setdefault(place.name, []).append(release_micros(place))
    return found


def _per_grant(runs: list[HandOvers]) -> float:
    return sum(outcome.bus for outcome in runs) / max(1, sum(outcome.grants for outcome in runs))


def rows(found: Found, cycles: int = HAND_OVER_CYCLES) -> list[str]:
    """The figures, as README-ready sentences."""
    sizes = [f"{size} primaries" for size in SIZES]
    ways = found.hand_overs
    bus = "; ".join(
        f"on {size}, {_per_grant(ways[size, 'classic']):.2f} classic and "
        f"{_per_grant(ways[size, 'sharded']):.2f} sharded"
        for size in sizes
    )
    grants = sum(outcome.grants for runs in ways.values() for outcome in runs)

    def gap(place: str, way: str = "sharded") -> float:
        return statistics.median(outcome.gap_p50 for outcome in ways[place, way])

    def ratios(place: str) -> list[float]:  # each repeat's cluster gap over the server's
        pairs = zip(ways[place, "sharded"], ways[ONE_SERVER, "sharded"], strict=True)
        return sorted(cluster.gap_p50 / alone.gap_p50 for cluster, alone in pairs)

    gaps = "; ".join(
        f"{size} {gap(size):.0f} µs, {statistics.median(ratios(size)):.2f}x "
        f"({ratios(size)[0]:.2f}x to {ratios(size)[-1]:.2f}x; classic wake-ups "
        f"{gap(size, 'classic'):.0f} µs)"
        for size in sizes
    )
    releases = ", ".join(
        f"{place} {statistics.median(found.releases[place]):.0f} µs"
        for place in (ONE_SERVER, *sizes)
    )
    rates = {
        place: statistics.median(outcome.per_second for outcome in runs)
        for place, runs in found.throughputs.items()
    }

    def cpu(place: str, field: str) -> float:
        return statistics.median(getattr(outcome, field) for outcome in found.throughputs[place])

    shares = "; ".join(
        f"{size} {min(s for t in found.throughputs[size] for s in t.shares) * 100:.0f} to "
        f"{max(s for t in found.throughputs[size] for s in t.shares) * 100:.0f} %"
        for size in sizes
    )
    costs = ", ".join(
        f"{place} {cpu(place, 'client_cpu'):.0f} + {cpu(place, 'server_cpu'):.0f}"
        for place in (ONE_SERVER, *sizes)
    )
    first, last = sizes[0], sizes[-1]
    return [
        "pub/sub messages the nodes send each other over the cluster bus per hand-over (each "
        "publishes one grant; ``CLUSTER INFO`` of every node against the primaries' ``PUBLISH`` "
        f"and ``SPUBLISH`` calls, over {grants:,} grants): {bus}. A classic ``PUBLISH`` goes "
        "to every other node; a sharded one stays on the lock's shard, reaching its replica",
        f"contended, {peers.PROCESSES} processes on one lock ({cycles} cycles each), the "
        "handoff gap p50 with sharded wake-ups against one redis-server with a replica, as "
        f"each shard has, in the same run ({gap(ONE_SERVER):.0f} µs; median of each repeat's "
        f"ratio, and its range): {gaps}. The holder's ``release()`` comes first in a "
        f"hand-over; uncontended, that call alone takes {releases} (a cluster's scripts go "
        "on connections kept aside for each node, as one server's do)",
        f"independent locks, {CYCLERS} processes (on 2 cores, which the servers share) each "
        "cycling acquire + release over names of its own, one on each primary, for "
        f"{CYCLING_SECONDS:.0f} s: one redis-server (with its replica) "
        f"{rates[ONE_SERVER]:,.0f} cycles/s, "
        f"{first} {rates[first]:,.0f} ({rates[first] / rates[ONE_SERVER]:.2f}x), {last} "
        f"{rates[last]:,.0f} ({rates[last] / rates[first]:.2f}x {first}'s); each primary's "
        f"share of the primaries' CPU (``INFO cpu``): {shares}. CPU per cycle, µs, the "
        "clients' (``time.process_time``, their listener and watchdog threads included) + "
        f"the servers' (primaries and replicas): {costs}; two cores run it all, so the "
        "throughput is at most two cores' worth of that sum, however many primaries serve",
    ]


def measure(cluster_caches: Callable[[str], dict[str, Any]], repeats: int) -> list[str]:
    """Run, then the rows: for bench/cluster.py."""
    return rows(run(cluster_caches, repeats))
