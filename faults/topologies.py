"""The Redis deployments the fault suite runs against, each started on loopback ports.

A topology starts and stops its servers, gives the Django settings that reach it, and plays
the faults that concern it. ``primary()`` is the server that holds the locks now: the
scenarios freeze, kill and restart it. Later topologies (Cluster, quorum) plug in here.
"""

from __future__ import annotations

from typing import Any, Protocol

from testproject.redis_server import RedisServer, find_redis_server

CACHE = "locks"


class Topology(Protocol):
    """What a scenario needs of a deployment."""

    name: str

    def start(self) -> None:
        """Start every server and wait until it answers."""

    def stop(self) -> None:
        """Stop every server this topology started."""

    def primary(self) -> RedisServer:
        """The server that grants locks now."""

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
        from testproject.topology import SentinelTopology  # type: ignore[import-not-found]

        self.topology = SentinelTopology(replicas=2, sentinels=3, service=self.service)

    def start(self) -> None:
        self.topology.start()

    def stop(self) -> None:
        self.topology.stop()

    def primary(self) -> RedisServer:
        server: RedisServer = self.topology.primary()
        return server

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


TOPOLOGIES = {"single": SingleServer, "sentinel": Sentinel}
