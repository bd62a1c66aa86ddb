"""The Redis deployments the fault suite runs against, each started on loopback ports.

A topology starts and stops its servers, gives the Django settings that reach it, and plays
the faults that concern it. ``primary()`` is the server that holds the suite's lock now (on a
cluster, the primary of the lock key's slot; of a quorum, the first primary that holds it): the
scenarios freeze, kill and restart it. ``heal()`` brings back what a fault left broken once the
workers have recovered from it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, Protocol

from testproject.redis_server import RedisServer, find_redis_server

CACHE = "locks"
# Keys tried to find one of a given cluster primary: each falls there with a chance of 1/3.
KEY_ATTEMPTS = 200


class Topology(Protocol):
    """What a scenario needs of a deployment."""

    name: str

    def start(self) -> None:
        """Start every server and wait until it answers."""

    def stop(self) -> None:
        """Stop every server this topology started."""

    def primary(self) -> RedisServer:
        """The server that grants the suite's lock now."""

    def heal(self) -> None:
        """Make the deployment whole again after a fault (bounded wait)."""

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        """CACHES (alias CACHE), REDIS_LOCK and what else the clients need to reach it."""


def timeout_options(socket_timeout: float | None) -> dict[str, Any]:
    """django-redis OPTIONS for a socket timeout, or for none at all (None): redis-py 8 would
    otherwise apply its own 5 s, and django-redis passes a None SOCKET_TIMEOUT on as unset."""
    if socket_timeout is None:
        none = {"socket_timeout": None, "socket_connect_timeout": None}
        return {"CONNECTION_POOL_KWARGS": none}
    return {"SOCKET_TIMEOUT": socket_timeout, "SOCKET_CONNECT_TIMEOUT": socket_timeout}


def lock_settings(wait_replicas: int) -> dict[str, Any]:
    """REDIS_LOCK for the alias the suite uses."""
    return {"CACHE": CACHE, "WAIT_REPLICAS": wait_replicas, "WAIT_TIMEOUT": 0.5}


class SingleServer:
    """One redis-server, with an append-only file synced at every write: a restart keeps its
    locks, as a production Redis that guards correctness should."""

    name = "single"

    def __init__(self) -> None:
        persistence = ("--appendonly", "yes", "--appendfsync", "always")
        self.server = RedisServer(binary=find_redis_server(), extra_args=persistence)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def primary(self) -> RedisServer:
        return self.server

    def heal(self) -> None:
        """Nothing to do: the faults here end with the server running."""

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        options = {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            **timeout_options(socket_timeout),
        }
        cache = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": self.server.url}
        return {
            "CACHES": {CACHE: {**cache, "OPTIONS": options}},
            "REDIS_LOCK": lock_settings(wait_replicas),
        }


class Sentinel:
    """A primary, two replicas and three Sentinels (testproject.topology.SentinelTopology),
    reached through django-redis's SentinelClient."""

    name = "sentinel"
    service = "mymaster"

    def __init__(self) -> None:
        from testproject.topology import SentinelTopology

        self.topology = SentinelTopology(replicas=2, sentinels=3, service=self.service)

    def start(self) -> None:
        self.topology.start()

    def stop(self) -> None:
        self.topology.stop()

    def primary(self) -> RedisServer:
        server: RedisServer = self.topology.primary()
        return server

    def heal(self) -> None:
        """Nothing here: each failover settles the deployment first (see below)."""

    def failover(self) -> RedisServer:
        """SENTINEL FAILOVER; the new primary once the Sentinels agree on it."""
        self.topology.settle()  # whole again after the last fault: every replica back
        server: RedisServer = self.topology.failover()
        return server

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary; the replica elected in its place."""
        self.topology.settle()  # whole again after the last fault: the killed one a replica
        server: RedisServer = self.topology.kill_primary()
        return server

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        sentinels = [[host, port] for host, port in self.topology.sentinel_addresses]
        options = {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_POOL_CLASS": "redis.sentinel.SentinelConnectionPool",
            "SENTINELS": sentinels,
            **timeout_options(socket_timeout),
        }
        cache = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{self.service}/0",
            "OPTIONS": options,
        }
        return {
            "CACHES": {CACHE: cache},
            "REDIS_LOCK": lock_settings(wait_replicas),
            "DJANGO_REDIS_CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        }


class Cluster:
    """Three primaries with a replica each (testproject.cluster.ClusterTopology), reached
    through django-valkey's ClusterValkeyCache as the README configures it.

    Redis's default ``cluster-require-full-coverage yes`` makes every node refuse commands
    (CLUSTERDOWN) while any slot has no primary; ``full_coverage=False`` sets it to ``no`` on
    every node, so that the other primaries serve on while one's slots wait for a replica.
    """

    name = "cluster"

    def __init__(self, full_coverage: bool = True) -> None:
        from testproject.cluster import ClusterTopology

        self.cluster = ClusterTopology()
        self.full_coverage = full_coverage
        self.killed: list[RedisServer] = []

    def start(self) -> None:
        self.cluster.start()
        self._configure()

    def stop(self) -> None:
        self.cluster.stop()

    def primary(self) -> RedisServer:
        """The primary of the slot of the lock's key (the key as the package computes it)."""
        from faults.worker import lock_key

        server: RedisServer = self.cluster.primary_of(lock_key())
        return server

    def heal(self) -> None:
        """Restart the killed nodes; each rejoins as a replica of the one that took over."""
        while self.killed:
            self.cluster.restart(self.killed.pop())
        self._configure()

    def _configure(self) -> None:
        """Turn full coverage off on every running node unless wanted (a restarted node
        starts with Redis's default, yes)."""
        from testproject.topology import call

        if self.full_coverage:
            return
        setting = ("cluster-require-full-coverage", "no")
        for server in self.cluster.servers:
            if server.running:
                call(server.host, server.port, "CONFIG", "SET", *setting)

    def kill_primary(self, key: str) -> tuple[RedisServer, RedisServer]:
        """SIGKILL the primary of ``key``'s slot; it and the replica that took over its slots,
        once every running node sees the cluster whole (bounded by the cluster's wait)."""
        self.killed.append(self.cluster.primary_of(key))
        old, new = self.cluster.kill_primary_of(key)
        return old, new

    def key_elsewhere(self) -> str:
        """A key served by a primary other than the lock's: the one with the most pub/sub
        clients (the workers' wake-up listeners) when they are on another primary, so that
        its failure also makes them move."""
        lock_port = self.primary().port
        others = [server for server in self.cluster.primaries() if server.port != lock_port]
        target = max(others, key=pubsub_clients)
        for attempt in range(KEY_ATTEMPTS):
            key = f"faults:elsewhere:{attempt}"
            if self.cluster.primary_of(key).port == target.port:
                return key
        raise RuntimeError(f"no key of {KEY_ATTEMPTS} falls on the primary {target.port}")

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
        cache = {
            "BACKEND": "django_valkey.cluster_cache.cache.ClusterValkeyCache",
            "LOCATION": self.cluster.url.replace("redis://", "valkey://"),
            # The cluster cache passes only these to its client (README, Redis Cluster).
            "OPTIONS": {"BASE_CLIENT_KWARGS": timeouts},
        }
        return {"CACHES": {CACHE: cache}, "REDIS_LOCK": lock_settings(wait_replicas)}


def pubsub_clients(server: RedisServer) -> int:
    """How many clients of ``server`` are in pub/sub mode now (0 when it does not answer)."""
    from testproject.topology import ReplyError, call

    try:
        listing = call(server.host, server.port, "CLIENT", "LIST", "TYPE", "pubsub")
    except (OSError, ReplyError):
        return 0
    return len(str(listing).splitlines())


class QuorumHold(NamedTuple):
    """A hold of the suite's lock on a quorum, as its primaries show it."""

    secret: str
    owner: str
    servers: list[RedisServer]  # the running primaries that have it
    lease_ms: int  # the least lease left among them


class Quorum:
    """Five independent primaries started here, one cache alias each (django-redis, with the
    socket timeouts the scenario sets): REDIS_LOCK CACHE lists the five, a quorum lock.

    The servers keep nothing on disk: a killed primary restarts empty. As Redlock requires of
    such a primary, ``heal()`` restarts one only when it has been down for ``restart_after``
    seconds (the scenarios set it above the workers' lease).
    """

    name = "quorum"
    size = 5

    def __init__(self) -> None:
        binary = find_redis_server()
        self.servers = [RedisServer(binary=binary) for _ in range(self.size)]
        self.aliases = tuple(f"{CACHE}{i}" for i in range(self.size))
        self.restart_after = 0.0
        self.killed: dict[int, float] = {}  # index -> when it was killed (monotonic)

    def start(self) -> None:
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def primary(self) -> RedisServer:
        """The first primary that holds the lock now, else the first one running."""
        hold = self.hold()
        running = [server for server in self.servers if server.running]
        return (hold.servers if hold else running or self.servers)[0]

    def hold(self) -> QuorumHold | None:
        """The hold of the suite's lock that a majority of the five primaries have (the same
        secret in its hash on each), as the running primaries that answer show it; None when
        no majority has one."""
        from testproject.topology import ReplyError, call

        found: dict[int, tuple[str, str, int]] = {}
        for index, (server, key) in enumerate(zip(self.servers, self.lock_keys(), strict=True)):
            if not server.running or server.paused:
                continue
            try:
                fields = call(server.host, server.port, "HMGET", key, "s", "o")
                pttl = call(server.host, server.port, "PTTL", key)
            except (OSError, ReplyError):
                continue
            if isinstance(fields, list) and fields[0] and isinstance(pttl, int):
                found[index] = (str(fields[0]), str(fields[1]), pttl)
        if not found:
            return None
        secret, count = Counter(value[0] for value in found.values()).most_common(1)[0]
        if count < self.size // 2 + 1:
            return None
        having = [i for i, value in found.items() if value[0] == secret]
        return QuorumHold(
            secret=secret,
            owner=found[having[0]][1],
            servers=[self.servers[i] for i in having],
            lease_ms=min(found[i][2] for i in having),
        )

    def lock_keys(self) -> list[str]:
        """The key of the suite's lock on each primary, as the package computes it."""
        from django_redis_lock.runtime import runtime
        from faults.worker import NAME

        backend: Any = runtime().backend(self.aliases)
        return [member.keys_for(NAME).lock for member in backend.members]

    def kill(self, server: RedisServer) -> None:
        """SIGKILL a primary (it loses everything it held); ``heal()`` restarts it later."""
        server.kill()
        self.killed[self.servers.index(server)] = time.monotonic()

    def restart(self, server: RedisServer) -> None:
        """Start a killed primary again, empty, on its port."""
        server.start()
        self.killed.pop(self.servers.index(server), None)

    def heal(self) -> None:
        """Resume a stopped primary; restart the killed ones, each once it has been down for
        ``restart_after`` seconds (a bounded sleep: that time is part of the fault)."""
        for server in self.servers:
            if server.paused:
                server.resume()
        for index, killed_at in sorted(self.killed.items(), key=lambda item: item[1]):
            time.sleep(max(0.0, killed_at + self.restart_after - time.monotonic()))
            self.restart(self.servers[index])

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        """A django-redis alias per primary; REDIS_LOCK CACHE lists them (WAIT_REPLICAS does
        not apply to a quorum: ``wait_replicas`` is ignored)."""
        options = {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            **timeout_options(socket_timeout),
        }
        caches = {
            alias: {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": server.url,
                "OPTIONS": options,
            }
            for alias, server in zip(self.aliases, self.servers, strict=True)
        }
        return {"CACHES": caches, "REDIS_LOCK": {"CACHE": list(self.aliases)}}


TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "single": SingleServer,
    "sentinel": Sentinel,
    "cluster": Cluster,
    "cluster-partial-coverage": partial(Cluster, full_coverage=False),
    "quorum": Quorum,
}
