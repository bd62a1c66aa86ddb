"""Where locks reach Redis: one interface (``base.Backend``), three topologies.

``single.py``: one server, or a primary found through Sentinel; ``cluster.py``: a Redis
Cluster (django-valkey's cluster cache); ``quorum.py``: a quorum of independent primaries, each
a backend of its own. :func:`backend_for` picks one for a cache alias, :func:`quorum_backend`
makes a quorum of several. ``clients.py`` finds a cache's client and makes its asyncio twin,
``errors.py`` groups the client libraries' exceptions, ``servers.py`` reads what the servers
say of themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend
from django_redis_lock.backends.clients import CLUSTER_CLIENTS, client_for, instance_of
from django_redis_lock.backends.cluster import ClusterLockBackend
from django_redis_lock.backends.quorum import QuorumBackend
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.exceptions import LockUnavailable


def backend_for(alias: str) -> LockBackend:
    """The backend of cache ``alias``: a cluster's when its client is a cluster client."""
    if alias not in caches.settings:
        raise ImproperlyConfigured(f"The cache alias {alias!r} (for locks) is not in CACHES.")
    cache = caches[alias]
    try:  # a cluster client connects as it is made, to learn the nodes
        client = client_for(cache)
    except errors.CLIENT as exc:
        raise LockUnavailable(f"Could not reach the Redis of cache {alias!r}: {exc}") from exc
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"The cache {alias!r} cannot hold locks: {exc}") from exc
    if instance_of(client, *CLUSTER_CLIENTS):
        return ClusterLockBackend(alias, cache, client)
    return LockBackend(alias, cache, client)


def quorum_backend(
    aliases: Sequence[str],
    member: Callable[[str], Backend],
    settle_call: Callable[[Backend, Any, list[object], str], None],
    channel_of: Callable[[Backend], str],
) -> QuorumBackend:
    """The backend of a quorum of cache aliases (checked), made of ``member(alias)`` each.

    What a quorum needs of the process it runs in is handed to it, by the runtime that makes
    it: how a call whose outcome is unknown is settled (the watchdog), and on which channel a
    member's grants arrive (its listener's).
    """
    members: list[LockBackend] = []
    for alias in aliases:
        backend = member(alias)
        if isinstance(backend, ClusterLockBackend) or not isinstance(backend, LockBackend):
            raise ImproperlyConfigured(
                f"The cache {alias!r} is a Redis Cluster: a quorum lock needs independent "
                "primaries, each a cache alias of one Redis server (or Sentinel service)."
            )
        members.append(backend)
    return QuorumBackend(members, settle_call, channel_of)
