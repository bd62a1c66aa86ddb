"""How locks reach Redis: the client, key function and scripts of one cache alias.

Supported caches: django-redis ``RedisCache`` (default, herd and Sentinel clients) and
Django's built-in ``django.core.cache.backends.redis.RedisCache``. The lock talks to the
cache's raw redis-py client, so it shares the project's connection settings and pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
from django.core.cache import BaseCache, caches
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import NoScriptError
from redis.sentinel import SentinelConnectionPool, SentinelManagedConnection

from django_redis_lock import scripts
from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockNotReplicated
from django_redis_lock.steps import ScriptName

# Marks where a lock name sits in a key built by the cache's key function.
_NAME_MARK = "\x00name\x00"
# Hex digits of the per-name hash tag: 48 bits keep collisions (harmless) rare.
_TAG_LENGTH = 12
# Length of "{<tag>}:l:", the text between the namespace and the name in a lock key.
_TAG_FRAME = _TAG_LENGTH + 5

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
# redis-py's own sync parsers, whose asyncio counterparts asyncio picks by itself.
_SYNC_PARSERS = frozenset(
    {"_RESP2Parser", "_RESP3Parser", "_HiredisParser", "PythonParser", "HiredisParser"}
)
_ASYNC_CONNECTIONS: dict[type, type[redis.asyncio.connection.AbstractConnection]] = {
    redis.Connection: redis.asyncio.Connection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}


@dataclass(frozen=True)
class LockKeys:
    """The Redis keys of one lock; they share a Cluster hash tag so one script can use all."""

    lock: str
    queue: str
    waiters: str
    #: The keys in the order every script takes them.
    all: tuple[str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "all", (self.lock, self.queue, self.waiters))


class LuaScript:
    """A Lua script of the lock, run with EVALSHA (with EVAL, which also loads it, when the
    server lost its scripts: a restart, a failover, SCRIPT FLUSH), on a sync or async client.

    The call goes straight to the client's ``execute_command``, so its retries and connection
    handling apply; redis-py's ``Script`` adds layers per call that cost about a tenth of an
    uncontended acquire and release.
    """

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def run(self, client: redis.Redis, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run it on a sync client; its reply."""
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
        except NoScriptError:
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)  # type: ignore[no-untyped-call]

    async def arun(
        self, client: redis.asyncio.Redis, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """Run it on an asyncio client; its reply."""
        command = ("EVALSHA", self.sha, len(keys), *keys, *args)
        try:
            return await client.execute_command(*command)  # type: ignore[no-untyped-call]
        except NoScriptError:
            return await client.execute_command("EVAL", self.source, *command[2:])  # type: ignore[no-untyped-call]


def _is_django_redis(cache: BaseCache) -> bool:
    try:
        from django_redis.cache import RedisCache
    except ImportError:  # pragma: no cover - django-redis is a dependency
        return False
    return isinstance(cache, RedisCache)


def redis_client_for(cache: BaseCache) -> redis.Redis:
    """The raw redis-py client that writes to the primary of ``cache``."""
    if _is_django_redis(cache):
        from django_redis.client import ShardClient

        client = cache.client  # type: ignore[attr-defined]
        if isinstance(client, ShardClient):
            raise ImproperlyConfigured(
                "django-redis's ShardClient spreads keys over several servers; "
                "a lock needs one. Give locks a cache alias with DefaultClient."
            )
        result: redis.Redis = client.get_client(write=True)
        return result
    if isinstance(cache, DjangoRedisCache):
        builtin: redis.Redis = cache._cache.get_client(write=True)
        return builtin
    raise ImproperlyConfigured(
        f"{type(cache).__module__}.{type(cache).__qualname__} is not a Redis cache; "
        "django_redis_lock needs django-redis or django.core.cache.backends.redis.RedisCache."
    )


def _async_client_for(client: redis.Redis) -> redis.asyncio.Redis:
    """An asyncio client on the same server, database and credentials as ``client``."""
    pool = client.connection_pool
    connection_class, options = async_options(pool)
    if isinstance(pool, SentinelConnectionPool):
        manager = pool.sentinel_manager
        addresses = [s.connection_pool.connection_kwargs for s in manager.sentinels]
        sentinels = [(address["host"], address["port"]) for address in addresses]
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            sentinels, sentinel_kwargs=manager.sentinel_kwargs, **options
        )
        master: redis.asyncio.Redis = sentinel.master_for(pool.service_name)
        return master
    async_pool = redis.asyncio.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **options
    )
    return redis.asyncio.Redis(connection_pool=async_pool)


def async_options(
    pool: redis.ConnectionPool,
) -> tuple[type[redis.asyncio.connection.AbstractConnection], dict[str, Any]]:
    """The asyncio connection class and options that do what ``pool``'s connections do, or
    ImproperlyConfigured naming what asyncio cannot do alike (never dropped silently)."""
    # A Sentinel pool's connections find the primary themselves: asyncio's Sentinel does too.
    sentinel = isinstance(pool, SentinelConnectionPool)
    options: dict[str, Any] = {}
    refused: list[str] = []
    for key, value in pool.connection_kwargs.items():
        if key in _PORTABLE_OPTIONS:
            options[key] = value
        elif key == "parser_class" and value.__name__ in _SYNC_PARSERS:
            continue  # the default parsers: asyncio's own default does the same
        elif not (key in _BOOKKEEPING or value is None or (sentinel and key == "connection_pool")):
            refused.append(key)
    connection_class = (
        redis.asyncio.Connection
        if sentinel and pool.connection_class is SentinelManagedConnection
        else _ASYNC_CONNECTIONS.get(pool.connection_class)
    )
    if connection_class is None:
        refused.append(f"connection_class={pool.connection_class.__qualname__}")
    if refused:
        raise ImproperlyConfigured(
            f"Async locks cannot use the connection options {', '.join(sorted(refused))}: "
            "redis-py's asyncio connections cannot do what they do. Give async locks a cache "
            "alias of their own without them (REDIS_LOCK['CACHE'], or using=...)."
        )
    return connection_class or redis.asyncio.Connection, options


class LockBackend:
    """Everything the lock core needs from one cache alias, built once per alias."""

    def __init__(self, alias: str) -> None:
        if alias not in caches.settings:
            raise ImproperlyConfigured(f"The cache alias {alias!r} (for locks) is not in CACHES.")
        cache = caches[alias]
        self.alias = alias
        self.client = redis_client_for(cache)
        self.namespace = lock_settings.KEY_NAMESPACE
        self._make_key = cache.make_key
        #: The lease a lock handed to a waiter starts with (REDIS_LOCK["HANDOVER_LEASE"]).
        self.handover_lease_ms = lock_settings.handover_lease_ms
        self._scripts = {
            name: LuaScript(scripts.with_lease(source, self.handover_lease_ms))
            for name, source in scripts.SOURCES.items()
        }
        #: Replicas that must acknowledge a grant (REDIS_LOCK["WAIT_REPLICAS"]; 0: no WAIT),
        #: and how long WAIT may take for them, in milliseconds.
        self.wait_replicas, self.wait_timeout_ms = lock_settings.replication()
        self._async: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}
        self._async_mutex = threading.Lock()
        #: Whether the primary is found through Sentinel, and so may move.
        self.sentinel = isinstance(self.client.connection_pool, SentinelConnectionPool)
        self.keys_for = lru_cache(maxsize=4096)(self._keys_for)
        self._frame = self._key_frame()

    def make_key(self, body: str) -> str:
        """``body`` through the cache's key function (KEY_PREFIX, VERSION, KEY_FUNCTION)."""
        return str(self._make_key(body))

    def _keys_for(self, name: str) -> LockKeys:
        """The Redis keys of the lock ``name`` (cached: ``keys_for``)."""
        # The tag comes first, so braces in the name or the prefix cannot change the slot.
        base = f"{self.namespace}:{{{_tag(name)}}}:"
        return LockKeys(
            lock=self.make_key(f"{base}l:{name}"),
            queue=self.make_key(f"{base}q:{name}"),
            waiters=self.make_key(f"{base}w:{name}"),
        )

    def _key_frame(self) -> tuple[str, str] | None:
        """The text the key function puts before and after a lock name, if it keeps names."""
        key = self.make_key(f"{self.namespace}:{{{'0' * _TAG_LENGTH}}}:l:{_NAME_MARK}")
        if key.count(_NAME_MARK) != 1:
            return None
        before, after = key.split(_NAME_MARK)
        return before[:-_TAG_FRAME], after

    @property
    def listable(self) -> bool:
        """Whether lock names can be read back from keys (a hashing KEY_FUNCTION hides them)."""
        return self._frame is not None

    def scan_pattern(self, name_pattern: str) -> str:
        """A SCAN MATCH pattern for the lock keys whose names match the glob ``name_pattern``."""
        frame = self._frame
        if frame is None:
            raise ImproperlyConfigured(
                f"The KEY_FUNCTION of cache {self.alias!r} does not keep key text, "
                "so held locks cannot be listed."
            )
        before, after = frame
        tag = "?" * _TAG_LENGTH
        return f"{glob_escape(before)}{{{tag}}}:l:{name_pattern}{glob_escape(after)}"

    def name_from_key(self, key: str) -> str | None:
        """The lock name inside a lock key found by :meth:`scan_pattern`; None when the key's
        hash tag is not its name's (someone else wrote it: no ``lock()`` reaches that key)."""
        assert self._frame is not None
        before, after = self._frame
        name = key[len(before) + _TAG_FRAME : len(key) - len(after)]
        tag_at = len(before) + 1  # ``before`` ends with "<namespace>:"; then "{<tag>}:l:"
        return name if key[tag_at : tag_at + _TAG_LENGTH] == _tag(name) else None

    def channel(self, process_id: str) -> str:
        """The pub/sub channel on which grants for one process arrive."""
        return self.make_key(f"{self.namespace}:wake:{process_id}")

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run one of the lock's scripts on the sync client; its reply."""
        try:
            return self._scripts[script].run(self.client, keys, args)
        except redis.ConnectionError as exc:
            if not _demoted(exc):
                raise
        # The server is a replica now (it wrote nothing): once more, on the current primary.
        self.primary_address()
        return self._scripts[script].run(self.client, keys, args)

    async def arun(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """Run one of the lock's scripts on the running event loop's client; its reply."""
        client = self.async_client()
        try:
            return await self._scripts[script].arun(client, keys, args)
        except redis.ConnectionError as exc:
            if not _demoted(exc):
                raise
        await client.connection_pool.get_master_address()  # type: ignore[attr-defined]
        return await self._scripts[script].arun(client, keys, args)

    def run_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run` followed by ``WAIT`` for :attr:`wait_replicas`, in one round trip; its
        reply, or LockNotReplicated when fewer replicas acknowledged in time."""
        results: list[Any] = []
        for command in self._acked_commands(script, keys, args):
            pipe = self.client.pipeline(transaction=False)
            for part in command:
                pipe.execute_command(*part)  # type: ignore[no-untyped-call]
            results = pipe.execute(raise_on_error=False)
            if not isinstance(results[0], NoScriptError):
                break
        return self._acknowledged(script, results)

    async def arun_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run_acked` for async code."""
        results: list[Any] = []
        for command in self._acked_commands(script, keys, args):
            pipe = self.async_client().pipeline(transaction=False)
            for part in command:
                pipe.execute_command(*part)
            results = await pipe.execute(raise_on_error=False)
            if not isinstance(results[0], NoScriptError):
                break
        return self._acknowledged(script, results)

    def _acked_commands(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> list[tuple[tuple[Any, ...], ...]]:
        """The pipelines to try in turn: the script by its SHA, then (unknown) by its source."""
        lua, wait = self._scripts[script], ("WAIT", self.wait_replicas, self.wait_timeout_ms)
        return [
            (("EVALSHA", lua.sha, len(keys), *keys, *args), wait),
            (("EVAL", lua.source, len(keys), *keys, *args), wait),
        ]

    def _acknowledged(self, script: ScriptName, results: list[Any]) -> Any:
        reply, acknowledged = results
        for result in results:
            if isinstance(result, Exception):
                raise result
        if int(acknowledged) < self.wait_replicas:
            if self.sentinel:  # a demoted primary lost its replicas: find the new one
                with contextlib.suppress(Exception):
                    self.primary_address()
            raise LockNotReplicated(
                f"{acknowledged} of the {self.wait_replicas} replicas REDIS_LOCK['WAIT_REPLICAS'] "
                f"asks for acknowledged the lock's {script} within "
                f"{self.wait_timeout_ms / 1000:g} s (REDIS_LOCK['WAIT_TIMEOUT'])",
                int(acknowledged),
                self.wait_replicas,
                reply,
            )
        return reply

    def queue(
        self, pipe: Any, script: ScriptName, keys: Sequence[str], args: Sequence[Any]
    ) -> None:
        """Queue a script in a pipeline (see :meth:`load`: a pipeline cannot load it)."""
        pipe.execute_command("EVALSHA", self._scripts[script].sha, len(keys), *keys, *args)

    def load(self, script: ScriptName) -> None:
        """Make sure the server knows a script, before pipelines that run it."""
        self.client.script_load(self._scripts[script].source)

    def async_client(self) -> redis.asyncio.Redis:
        """The asyncio client for the running event loop (one per loop).

        Clients of loops that have closed (``asyncio.run`` and ``async_to_sync`` make one loop
        per call) are dropped and hung up when a new loop needs one, so they do not pile up.
        """
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            with self._async_mutex:
                for closed in [other for other in self._async if other.is_closed()]:
                    _hang_up(self._async.pop(closed))
                client = self._async[loop] = _async_client_for(self.client)
        return client

    def primary_address(self) -> tuple[str, int] | None:
        """Of a Sentinel backend, the primary's address the sentinels give now (a round trip
        to them); None for a server that cannot move.

        redis-py does not follow a failover by itself (it watches no ``+switch-master``): a
        pooled connection keeps talking to a demoted primary, which stays writable for
        seconds. Asking here makes the pool hang up its connections to an older primary
        (redis-py's pool does that when the address it knows changes), and so do the async
        clients (:meth:`note_primary`).
        """
        pool = self.client.connection_pool
        if not isinstance(pool, SentinelConnectionPool):
            return None
        host, port = pool.get_master_address()  # type: ignore[no-untyped-call]
        address = (str(host), int(port))
        self.note_primary(address)
        return address

    def note_primary(self, address: tuple[str, int]) -> None:
        """The primary is at ``address`` now: hang up the async clients connected to another
        one, so that the next async lock call reaches the new primary."""
        with self._async_mutex:
            for loop, client in list(self._async.items()):
                known = getattr(client.connection_pool, "master_address", None)
                if known is not None and tuple(known) != address:
                    _hang_up(self._async.pop(loop))

    def primaries(self) -> list[redis.Redis]:
        """The servers whose keys a listing reads with SCAN: the one primary of a single
        server or a Sentinel service (a cluster backend would give each of its primaries)."""
        return [self.client]

    def pubsub_connection(self, read_timeout: float) -> Any:
        """A connection of its own to the primary, configured like the cache's (address,
        auth, TLS, Sentinel) but outside its pool, reading with ``read_timeout``."""
        pool = self.client.connection_pool
        return pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": read_timeout})


def _demoted(error: redis.ConnectionError) -> bool:
    """Whether a Sentinel-managed connection failed because its server answered READONLY:
    a primary demoted by a failover (redis-py hangs that connection up and raises this)."""
    return isinstance(error.__context__, redis.ReadOnlyError)


def _hang_up(client: redis.asyncio.Redis) -> None:
    """Shut down the sockets of a client whose event loop is closed: nothing can be awaited
    there, and left to the garbage collector the server keeps their connections meanwhile.
    redis-py offers no synchronous way, so this reads its pool's and connections' attributes,
    and does nothing where a redis-py version lacks them."""
    pool = client.connection_pool
    for attribute in ("_available_connections", "_in_use_connections"):
        for connection in getattr(pool, attribute, ()):
            writer = getattr(connection, "_writer", None)
            sock = writer.get_extra_info("socket") if writer is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _tag(name: str) -> str:
    """The Redis Cluster hash tag of the keys of lock ``name``."""
    return hashlib.blake2b(name.encode(), digest_size=_TAG_LENGTH // 2).hexdigest()


def glob_escape(text: str) -> str:
    """``text`` as a Redis glob pattern that matches only itself."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
