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

from faults.proxy import HOST, Proxy
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

    def __init__(self, persistent: bool = True) -> None:
        persistence = ("--appendonly", "yes", "--appendfsync", "always") if persistent else ()
        self.server = RedisServer(binary=find_redis_server(), extra_args=persistence)
        if not persistent:  # the unsafe setting the documentation warns of: nothing on disk
            self.name = "single-volatile"

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def primary(self) -> RedisServer:
        return self.server

    def heal(self) -> None:
        """Nothing to do: the faults here end with the server running."""

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        return server_settings(self.server.url, socket_timeout, wait_replicas)


def server_settings(url: str, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
    """Settings of clients of the one server at ``url`` (django-redis's DefaultClient)."""
    options = {
        "CLIENT_CLASS": "django_redis.client.DefaultClient",
        **timeout_options(socket_timeout),
    }
    cache = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
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
        addresses = self.topology.sentinel_addresses
        return sentinel_settings(addresses, self.service, socket_timeout, wait_replicas)


def sentinel_settings(
    sentinels: list[tuple[str, int]],
    service: str,
    socket_timeout: float | None,
    wait_replicas: int,
    sentinel_timeout: float | None = None,
) -> dict[str, Any]:
    """Settings of clients that find the primary through ``sentinels`` (django-redis's
    SentinelClient); ``sentinel_timeout``: the socket timeout of their calls to the
    sentinels (SENTINEL_KWARGS), as the documentation's example sets it."""
    options = {
        "CLIENT_CLASS": "django_redis.client.SentinelClient",
        "CONNECTION_POOL_CLASS": "redis.sentinel.SentinelConnectionPool",
        "SENTINELS": [[host, port] for host, port in sentinels],
        **timeout_options(socket_timeout),
    }
    if sentinel_timeout is not None:
        options["SENTINEL_KWARGS"] = {"socket_timeout": sentinel_timeout}
    cache = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{service}/0",
        "OPTIONS": options,
    }
    return {
        "CACHES": {CACHE: cache},
        "REDIS_LOCK": lock_settings(wait_replicas),
        "DJANGO_REDIS_CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
    }


class Cluster:
    """Three primaries with a replica each (testproject.cluster.ClusterTopology), reached
    through django-valkey's ClusterValkeyCache as the documentation configures it.

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
            # The cluster cache passes only these to its client (docs, Redis Cluster).
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


# The sentinels of a partition topology, and the socket timeout of the clients' calls to them
# (SENTINEL_KWARGS), as the documentation's example sets it.
PARTITION_SENTINELS = 3
SENTINEL_TIMEOUT = 0.5
# How long the sentinels wait before they flag a server down. With the other Sentinel
# scenarios' 1 s (Sentinel's ping period, and the least time between two reconnections) the
# sentinels flagged the replica they had just promoted down in 3 cuts of 8 here, and promoted
# another; with 1.5 s, in none of 10, and the failover took no longer.
PARTITION_DOWN_AFTER_MS = 1500
# Sentinel's failover timeout while nothing is cut. A sentinel also waits this long before it
# points a replica at the primary's address as the sentinels know it (+fix-slave-config): the
# replicas left on the old primary's side replicate from it directly, not through the proxy the
# sentinels reach it by, and must go on doing so. While a cut lasts the timeout is the other
# Sentinel scenarios' (testproject.topology.FAILOVER_TIMEOUT_MS), so that a failover starts at
# once and a split vote is tried again within seconds; it is set back once the failover is over.
QUIET_FAILOVER_TIMEOUT_MS = 600_000
# For the sentinels to promote a replica after a cut, and then to end the failover.
FAILOVER_WAIT = 15.0
# After the heal, for the sentinels to demote the old primary: they do once it has answered for
# 8 s, at their next look at it (every 10 s).
DEMOTION_WAIT = 30.0
# Then for every replica to be in sync with the new primary.
REJOIN_WAIT = 20.0


class Partition:
    """A primary, ``replicas`` replicas and three sentinels, wired so that a partition can cut
    the primary off (proxies of faults/proxy.py, on loopback):

    - the sentinels reach the primary only through its proxy: they monitor the proxy's
      address, and the primary announces it (``replica-announce-port``) for when it has become
      a replica;
    - the replicas on the sentinels' side replicate through that proxy too;
    - ``left`` replicas stay on the old primary's side: each replicates from it directly, and
      the sentinels reach it through a proxy of its own, which it announces.

    ``cut(mode)`` cuts every proxy at once ("reset" or "hold"): the old primary and the
    replicas left with it on one side; the sentinels, the other replicas and the clients that
    follow the sentinels on the other. The clients of the old primary's side (workers of an
    even index) use a plain django-redis cache pointed straight at it, as clients the partition
    left with it would; the others follow the sentinels as the documentation configures them.
    """

    service = "mymaster"

    def __init__(self, replicas: int = 2, left: int = 0) -> None:
        if not 0 <= left < replicas:
            raise ValueError(f"{left} of {replicas} replicas cannot stay with the old primary")
        self.name = f"partition-r{replicas}-left{left}"
        self.replica_count, self.left_count = replicas, left
        self.binary = find_redis_server()
        self.old = RedisServer(binary=self.binary)
        self.left: list[RedisServer] = []  # replicas on the old primary's side
        self.far: list[RedisServer] = []  # replicas on the sentinels' side
        self.sentinels: list[RedisServer] = []
        self.proxies: list[Proxy] = []
        self.known: dict[int, RedisServer] = {}  # the port the sentinels know a server by
        self.cut_mode: str | None = None
        self.promoted: RedisServer | None = None
        self.promoted_at = 0.0  # when (monotonic) every sentinel named it
        self.repromoted = False  # whether they promoted another one before the failover ended
        self.healed_at = 0.0  # when (monotonic) the proxies forwarded again

    def describe(self) -> str:
        """The wiring in a few words, for the report."""
        return (
            f"{self.replica_count} replicas, {self.left_count} of them on the old primary's "
            f"side, {PARTITION_SENTINELS} sentinels"
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        from testproject.topology import call, wait_for

        try:
            self.old.start()
            via = self._behind_proxy(self.old)
            for _ in range(self.left_count):
                replica = RedisServer(binary=self.binary)
                self.left.append(replica)
                replica.start()
                self._behind_proxy(replica)
                call(replica.host, replica.port, "REPLICAOF", HOST, str(self.old.port))
            for _ in range(self.replica_count - self.left_count):
                replica = RedisServer.replica(HOST, via, binary=self.binary)
                self.far.append(replica)
                replica.start()
                self.known[replica.port] = replica
            for replica in [*self.left, *self.far]:
                replica.wait_until_synced()
            for _ in range(PARTITION_SENTINELS):
                sentinel = RedisServer.sentinel(HOST, via, self.service, binary=self.binary)
                self.sentinels.append(sentinel)
                sentinel.start()
            self._sentinels_set("down-after-milliseconds", str(PARTITION_DOWN_AFTER_MS))
            self._sentinels_set("failover-timeout", str(QUIET_FAILOVER_TIMEOUT_MS))
            # Every replica the sentinels reach is told to follow the promoted one at once: with
            # Sentinel's default (one at a time) a replica whose connection a "hold" cut keeps
            # open takes the only turn, and the others wait for the failover's timeout.
            self._sentinels_set("parallel-syncs", str(self.replica_count))
            wait_for("the sentinels to know each other and every replica", self._acquainted)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every server, sentinel and proxy this topology started."""
        for server in [*self.sentinels, *self.far, *self.left, self.old]:
            server.stop()
        for proxy in self.proxies:
            proxy.stop()
        for group in (self.sentinels, self.far, self.left, self.proxies):
            group.clear()

    def _behind_proxy(self, server: RedisServer) -> int:
        """Put a proxy in front of ``server`` and make it announce the proxy's port."""
        from testproject.topology import call

        proxy = Proxy(server.port)
        self.proxies.append(proxy)
        port = proxy.start()
        call(server.host, server.port, "CONFIG", "SET", "replica-announce-ip", HOST)
        call(server.host, server.port, "CONFIG", "SET", "replica-announce-port", str(port))
        self.known[port] = server
        return port

    # -- what the sentinels say ----------------------------------------------------------------

    def primary(self) -> RedisServer:
        """The server every answering sentinel names as the primary."""
        server = self._named()
        if server is None:
            raise RuntimeError(f"the sentinels of {self.name} agree on no primary")
        return server

    def _named(self) -> RedisServer | None:
        from testproject.topology import ReplyError, call

        ports = set()
        for sentinel in self.sentinels:
            try:
                reply = call(
                    HOST, sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                )
            except (OSError, ReplyError):
                return None
            if not isinstance(reply, list) or len(reply) != 2:
                return None
            ports.add(int(str(reply[1])))
        return self.known.get(ports.pop()) if len(ports) == 1 else None

    def _master_state(self, sentinel: RedisServer) -> dict[str, str]:
        from testproject.topology import ReplyError, call

        try:
            reply = call(HOST, sentinel.port, "SENTINEL", "MASTER", self.service)
        except (OSError, ReplyError):
            return {}
        return _pairs(reply) if isinstance(reply, list) else {}

    def _acquainted(self) -> bool | None:
        """Every sentinel knows the two others and every replica, none of them down."""
        from testproject.topology import ReplyError, call

        for sentinel in self.sentinels:
            state = self._master_state(sentinel)
            if state.get("num-other-sentinels") != str(PARTITION_SENTINELS - 1):
                return None
            try:
                reply = call(HOST, sentinel.port, "SENTINEL", "REPLICAS", self.service)
            except (OSError, ReplyError):
                return None
            entries = (
                [_pairs(e) for e in reply if isinstance(e, list)] if isinstance(reply, list) else []
            )
            healthy = [e for e in entries if e.get("flags") == "slave"]
            if len(healthy) < self.replica_count:
                return None
        return True

    def _sentinels_set(self, option: str, value: str) -> None:
        from testproject.topology import call

        for sentinel in self.sentinels:
            call(HOST, sentinel.port, "SENTINEL", "SET", self.service, option, value)

    # -- the partition -------------------------------------------------------------------------

    def cut(self, mode: str) -> None:
        """Cut the old primary's side off the sentinels' ("reset" or "hold")."""
        from testproject.topology import FAILOVER_TIMEOUT_MS

        for proxy in self.proxies:
            proxy.cut(mode)
        self.cut_mode = mode
        self._sentinels_set("failover-timeout", str(FAILOVER_TIMEOUT_MS))

    def wait_promoted(self) -> RedisServer:
        """The replica the sentinels promoted after the cut, once every sentinel names it and
        it says it is a primary, and they ended the failover (bounded waits). With a
        down-after of one second (Sentinel's ping period) the sentinels may flag a replica
        they just promoted down and promote another: the one they name in the end."""
        from testproject.topology import info, wait_for

        def promoted() -> RedisServer | None:
            server = self._named()
            if server is None or server is self.old or info(server).get("role") != "master":
                return None
            return server

        first = wait_for("the sentinels to promote", promoted, FAILOVER_WAIT)
        self.promoted_at = time.monotonic()

        def over() -> RedisServer | None:
            server = promoted()
            if server is None:
                return None
            for sentinel in self.sentinels:
                state = self._master_state(sentinel)
                if state.get("port") != str(server.port) or state.get("flags") != "master":
                    return None
            return server

        self.promoted = wait_for("the sentinels to end the failover", over, FAILOVER_WAIT)
        self._sentinels_set("failover-timeout", str(QUIET_FAILOVER_TIMEOUT_MS))
        self.repromoted = self.promoted is not first
        return self.promoted

    def reconnect(self) -> None:
        """Heal the partition: every proxy forwards again."""
        for proxy in self.proxies:
            proxy.heal()
        self.healed_at = time.monotonic()
        self.cut_mode = None
        self._sentinels_set("failover-timeout", str(QUIET_FAILOVER_TIMEOUT_MS))

    def heal(self) -> None:
        """Reconnect, if a cut is still on (the scenario heals it itself)."""
        if self.cut_mode is not None:
            self.reconnect()

    def wait_demoted(self) -> float | None:
        """When (monotonic) the old primary became a replica again; None if it did not
        within DEMOTION_WAIT."""
        from testproject.topology import info, wait_for

        def demoted() -> float | None:
            return time.monotonic() if info(self.old).get("role") == "slave" else None

        try:
            moment: float = wait_for("the old primary's demotion", demoted, DEMOTION_WAIT)
        except TimeoutError:
            return None
        return moment

    def wait_whole(self) -> None:
        """Wait (bounded) until every server but the new primary is a replica in sync."""
        from testproject.topology import info, wait_for

        def whole() -> bool | None:
            for server in [self.old, *self.left, *self.far]:
                if server is self.promoted:
                    continue
                fields = info(server)
                if fields.get("role") != "slave" or fields.get("master_link_status") != "up":
                    return None
            return True

        wait_for("every replica in sync again", whole, REJOIN_WAIT)

    # -- clients -------------------------------------------------------------------------------

    @staticmethod
    def old_side(index: int) -> bool:
        """Whether worker ``index`` is a client of the old primary's side."""
        return index % 2 == 0

    def settings(self, socket_timeout: float | None, wait_replicas: int) -> dict[str, Any]:
        """The settings of the clients that follow the sentinels."""
        sentinels = [(HOST, sentinel.port) for sentinel in self.sentinels]
        return sentinel_settings(
            sentinels, self.service, socket_timeout, wait_replicas, SENTINEL_TIMEOUT
        )

    def worker_settings(
        self, index: int, socket_timeout: float | None, wait_replicas: int
    ) -> dict[str, Any]:
        """Worker ``index``'s settings: the old primary's side or the sentinels'."""
        if self.old_side(index):
            return server_settings(self.old.url, socket_timeout, wait_replicas)
        return self.settings(socket_timeout, wait_replicas)


def _pairs(reply: list[Any]) -> dict[str, str]:
    """A flat [key, value, key, value...] reply as a dict."""
    return dict(zip(map(str, reply[::2]), map(str, reply[1::2]), strict=False))


TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "single": SingleServer,
    "single-volatile": partial(SingleServer, persistent=False),
    "sentinel": Sentinel,
    "cluster": Cluster,
    "cluster-partial-coverage": partial(Cluster, full_coverage=False),
    "quorum": Quorum,
    "partition-r2-left0": partial(Partition, replicas=2, left=0),
    "partition-r3-left1": partial(Partition, replicas=3, left=1),
    "partition-r2-left1": partial(Partition, replicas=2, left=1),
}
