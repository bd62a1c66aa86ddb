"""How the cache's client is found, and its asyncio twin made: for redis-py and valkey-py.

The lock uses the cache's own raw client (so it shares the project's connection settings and
pools; its blocking scripts go on connections made like the pool's, see ``lane.py``) and builds
an asyncio client with the same options, refusing with a clear error any
option asyncio cannot carry rather than dropping it. valkey-py is a fork of redis-py: its
classes have the same names in its own packages, so each client is handled by the library it
comes from (:func:`library_of`).
"""

from __future__ import annotations

import contextlib
import importlib
import socket
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.exceptions import ImproperlyConfigured

#: A client of redis-py or valkey-py (``redis.Redis``, ``valkey.Valkey``, or a cluster client):
#: the two libraries share their interface but not their classes.
Client = Any

# Connection options that mean the same to redis-py's sync and asyncio connections.
_PORTABLE_OPTIONS = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "credential_provider",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "retry_on_timeout",
        "encoding",
        "encoding_errors",
        "lib_name",
        "lib_version",
        "retry_on_error",
        "decode_responses",
        "client_name",
        "health_check_interval",
        "protocol",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    }
)


# What redis-py keeps in a pool's connection_kwargs for itself, not options a user set.
_BOOKKEEPING = frozenset(
    {
        "command_packer",
        "driver_info",
        "event_dispatcher",
        "himport_registry",
        "maint_notifications_config",
        "maint_notifications_pool_handler",
        "maintenance_notification_hash",
        "maintenance_state",
        "orig_host_address",
        "orig_socket_connect_timeout",
        "orig_socket_timeout",
        "oss_cluster_maint_notifications_handler",
    }
)
# The libraries' own sync parsers, whose asyncio counterparts asyncio picks by itself.
_SYNC_PARSERS = frozenset(
    {
        "_RESP2Parser",
        "_RESP3Parser",
        "_HiredisParser",
        "_LibvalkeyParser",
        "PythonParser",
        "HiredisParser",
        "ClusterParser",
    }
)
_LIBRARIES = ("redis", "valkey")
# The connection classes whose asyncio twins (same name, in the library's asyncio package) do
# the same.
_PORTABLE_CONNECTIONS = ("Connection", "SSLConnection", "UnixDomainSocketConnection")


def subclass_of(cls: object, *paths: str) -> bool:
    """Whether ``cls`` is one of the classes named by ``paths`` (module and qualified name
    where it is defined), or a subclass of one. Names are compared, nothing is imported:
    importing django-valkey replaces Django's cache-closing signal receiver, which a project
    that has it installed without using it must not get from us."""
    if not isinstance(cls, type):
        return False
    return any(f"{base.__module__}.{base.__qualname__}" in paths for base in cls.__mro__)


def instance_of(value: object, *paths: str) -> bool:
    """Whether ``value`` is an instance of one of the classes named by ``paths``."""
    return subclass_of(type(value), *paths)


#: The cache backends locks can use, and the clients of theirs that keep a lock on one server.
SUPPORTED_CACHES = (
    "django_redis.cache.RedisCache",
    "django.core.cache.backends.redis.RedisCache",
    "django_valkey.cache.ValkeyCache",
    "django_valkey.cluster_cache.cache.ClusterValkeyCache",
)
SHARDING_CLIENTS = (
    "django_redis.client.sharded.ShardClient",
    "django_valkey.client.sharded.ShardClient",
)
CLUSTER_CLIENTS = ("valkey.cluster.ValkeyCluster",)
SENTINEL_POOLS = (
    "redis.sentinel.SentinelConnectionPool",
    "valkey.sentinel.SentinelConnectionPool",
)


def client_for(cache: BaseCache) -> Client:
    """The raw client (redis-py's or valkey-py's) that writes to the primary of ``cache``."""
    if isinstance(cache, DjangoRedisCache):
        return cache._cache.get_client(write=True)  # noqa: SLF001  Django's RedisCache exposes its client only as _cache
    if not instance_of(cache, *SUPPORTED_CACHES):
        raise ImproperlyConfigured(
            f"{type(cache).__module__}.{type(cache).__qualname__} is not a Redis cache locks can "
            "use; "
            "django_redis_lock needs django-redis, django.core.cache.backends.redis.RedisCache "
            "or django-valkey (ValkeyCache, ClusterValkeyCache)."
        )
    client = cache.client  # type: ignore[attr-defined]
    if instance_of(client, *SHARDING_CLIENTS):
        raise ImproperlyConfigured(
            f"{type(client).__qualname__} spreads keys over several servers by their name; "
            "a lock needs all its keys on one. Give locks a cache alias with DefaultClient "
            "(or django-valkey's cluster cache, which keeps a lock's keys in one slot)."
        )
    return client.get_client(write=True)


def library_class(value: object) -> type:
    """The class of redis-py or valkey-py that ``value``'s class is or derives from (a
    project's subclass of a client or pool counts as the library's own)."""
    for cls in type(value).__mro__:
        if cls.__module__.partition(".")[0] in _LIBRARIES:
            return cls
    raise ImproperlyConfigured(
        f"{type(value).__module__}.{type(value).__qualname__} is not a client or connection "
        "pool of redis-py or valkey-py, which locks need."
    )


def library_of(value: object) -> ModuleType:
    """The library a client (or pool) belongs to: ``redis`` or ``valkey``."""
    return importlib.import_module(library_class(value).__module__.partition(".")[0])


def library_code(function: object) -> bool:
    """Whether ``function`` is redis-py's or valkey-py's own: defined in either, and not
    wrapped (an instrumentation's wrapper keeps the module of what it wraps)."""
    if hasattr(function, "__wrapped__"):
        return False
    module = getattr(function, "__module__", None) or ""
    return module.partition(".")[0] in _LIBRARIES


# The settings django-redis's and django-valkey's caches read when their OPTIONS do not say
# whether to hang their connections up at the end of each request (CLOSE_CONNECTION).
_CLOSE_SETTINGS = {
    "django_redis": "DJANGO_REDIS_CLOSE_CONNECTION",
    "django_valkey": "DJANGO_VALKEY_CLOSE_CONNECTION",
}


def closes_connections(cache: BaseCache) -> bool:
    """Whether ``cache`` hangs its connections up at the end of each request: django-redis's
    and django-valkey's ``CLOSE_CONNECTION`` option, else their setting (Django's own Redis
    cache keeps them)."""
    setting = _CLOSE_SETTINGS.get(type(cache).__module__.partition(".")[0])
    params = getattr(cache, "_params", None)
    if setting is None or not isinstance(params, dict):
        return False
    options = params.get("OPTIONS") or {}
    return bool(options.get("CLOSE_CONNECTION", getattr(settings, setting, False)))


def is_sentinel_pool(pool: object) -> bool:
    """Whether ``pool`` finds its server through Sentinel (so the primary may move)."""
    return instance_of(pool, *SENTINEL_POOLS)


def async_client_for(client: Client) -> Client:
    """An asyncio client on the same server, database and credentials as ``client``."""
    aio = importlib.import_module(f"{library_of(client).__name__}.asyncio")
    pool = client.connection_pool
    connection_class, options = async_options(pool)
    if is_sentinel_pool(pool):
        manager = pool.sentinel_manager
        addresses = [s.connection_pool.connection_kwargs for s in manager.sentinels]
        sentinels = [(address["host"], address["port"]) for address in addresses]
        sentinel = aio.sentinel.Sentinel(
            sentinels, sentinel_kwargs=manager.sentinel_kwargs, **options
        )
        return sentinel.master_for(pool.service_name)
    async_pool = aio.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **options
    )
    return aio.Redis(connection_pool=async_pool)


def async_options(pool: Any) -> tuple[type, dict[str, Any]]:
    """The asyncio connection class and options that do what ``pool``'s connections do, or
    ImproperlyConfigured naming what asyncio cannot do alike (never dropped silently)."""
    # A Sentinel pool's connections find the primary themselves: asyncio's Sentinel does too.
    sentinel = is_sentinel_pool(pool)
    options, refused = portable_options(pool.connection_kwargs, sentinel=sentinel)
    library = library_of(pool)
    aio = importlib.import_module(f"{library.__name__}.asyncio")
    connection_class = None
    if sentinel and pool.connection_class.__name__ == "SentinelManagedConnection":
        connection_class = aio.Connection
    for name in _PORTABLE_CONNECTIONS:
        if pool.connection_class is getattr(library, name, None):
            connection_class = getattr(aio, name)
    if connection_class is None:
        refused.append(f"connection_class={pool.connection_class.__qualname__}")
    refuse_async(refused)
    return connection_class or aio.Connection, options


def portable_options(
    connection_kwargs: dict[str, Any], sentinel: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """The options of ``connection_kwargs`` an asyncio connection takes alike, and the names
    of those it cannot carry (bookkeeping of the library and defaults left out)."""
    options: dict[str, Any] = {}
    refused: list[str] = []
    for key, value in connection_kwargs.items():
        if key in _PORTABLE_OPTIONS:
            options[key] = value
        elif key == "parser_class" and value.__name__ in _SYNC_PARSERS:
            continue  # the default parsers: asyncio's own default does the same
        elif not (key in _BOOKKEEPING or value is None or (sentinel and key == "connection_pool")):
            refused.append(key)
    return options, refused


def refuse_async(refused: list[str]) -> None:
    """ImproperlyConfigured naming the connection options asyncio cannot carry, if any."""
    if refused:
        raise ImproperlyConfigured(
            f"Async locks cannot use the connection options {', '.join(sorted(refused))}: "
            "the library's asyncio connections cannot do what they do. Give async locks a "
            "cache alias of their own without them (REDIS_LOCK['CACHE'], or using=...)."
        )


def hang_up(client: Client) -> None:
    """Shut down the sockets of a client whose event loop is closed: nothing can be awaited
    there, and left to the garbage collector the server keeps their connections meanwhile.
    The libraries offer no synchronous way, so this reads their pools' (or cluster nodes')
    and connections' attributes, and does nothing where a version lacks them."""
    for connection in list(_connections_of(client)):
        writer = getattr(connection, "_writer", None)
        sock = writer.get_extra_info("socket") if writer is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            # Hung up: the connection must not warn of itself as unclosed when collected
            # (valkey-py's warning fails on a Sentinel connection whose pool is gone).
            with contextlib.suppress(AttributeError):
                connection._writer = connection._reader = None  # noqa: SLF001  the libraries offer no public way to drop a dead stream


def _connections_of(client: Client) -> Iterator[Any]:
    pool = getattr(client, "connection_pool", None)
    for attribute in ("_available_connections", "_in_use_connections"):
        yield from getattr(pool, attribute, ())
    nodes = getattr(client, "get_nodes", None)  # an asyncio cluster client
    for node in nodes() if nodes is not None else ():
        yield from getattr(node, "_connections", ())
