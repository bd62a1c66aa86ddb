"""A backend of one cache alias: one Redis server, or a primary found through Sentinel.

Supported caches: django-redis ``RedisCache`` (default, herd and Sentinel clients), Django's
built-in ``django.core.cache.backends.redis.RedisCache``, and django-valkey's ``ValkeyCache``
(default, herd and Sentinel clients) and ``ClusterValkeyCache`` (``cluster.py``, a subclass).
``clients.py`` finds the cache's client and makes its asyncio twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from django.core.cache import BaseCache
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock import scripts
from django_redis_lock.backends import errors
from django_redis_lock.backends.acked import (
    aacked_results,
    acked_commands,
    acked_results,
    acknowledged,
)
from django_redis_lock.backends.base import (
    NAME_MARK,
    TAG_FRAME,
    TAG_LENGTH,
    Backend,
    EncodedKeys,
    LockKeys,
    LuaScript,
    connection_of,
    demoted,
    glob_escape,
    tag,
)
from django_redis_lock.backends.clients import (
    Client,
    async_client_for,
    async_options,
    hang_up,
    is_sentinel_pool,
)
from django_redis_lock.backends.lane import Lane, lane_for
from django_redis_lock.backends.reads import ListingReads
from django_redis_lock.conf import lock_settings
from django_redis_lock.scripts import ScriptName


class LockBackend(ListingReads):
    """Everything the lock core needs from one cache alias, built once per alias (by
    ``backends.backend_for``): a single server, or a primary found through Sentinel."""

    #: Waiters queue on the server, first come, first served.
    queues = True

    def __init__(self, alias: str, cache: BaseCache, client: Client) -> None:
        self.alias = alias
        #: The cache's raw client (redis-py's or valkey-py's), writing to the primary.
        self.client = client
        self.namespace = lock_settings.KEY_NAMESPACE
        self.hash_tags = lock_settings.hash_tags
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
        self._async: dict[asyncio.AbstractEventLoop, Client] = {}
        self._async_mutex = threading.Lock()
        #: Whether the primary is found through Sentinel, and so may move.
        self.sentinel = is_sentinel_pool(getattr(client, "connection_pool", None))
        self.keys_for = lru_cache(maxsize=4096)(self._keys_for)
        self.shared_keys_for = lru_cache(maxsize=4096)(self._shared_keys_for)
        self.rate_keys_for = lru_cache(maxsize=4096)(self._rate_keys_for)
        self._frame = self._key_frame()
        self._encoded = EncodedKeys(client)
        # The scripts go through a lane of connections beside the pool where it may have one.
        self._lane = lane_for(client, cache)
        self._caller: Client = self._lane or client

    def make_key(self, body: str) -> str:
        """``body`` through the cache's key function (KEY_PREFIX, VERSION, KEY_FUNCTION)."""
        return str(self._make_key(body))

    def _keys_for(self, name: str) -> LockKeys:
        """The Redis keys of the lock ``name`` (cached: ``keys_for``)."""
        return self._named_keys(name, "lqws", family="")

    def _shared_keys_for(self, name: str, kind: str = "s") -> LockKeys:
        """The Redis keys of the semaphore (``kind`` "s") or read/write lock ("r", "w") ``name``:
        its holders, queue and waiters (letters of their own: a lock, a semaphore and a
        read/write lock of one name are apart), and the statistics a lock of that name would
        have."""
        return self._named_keys(name, "mnos" if kind == "s" else "rpus", family="shared_")

    def _rate_keys_for(self, name: str) -> tuple[str, str]:
        """The keys of the rate limit ``name`` (cached: ``rate_keys_for``): its state (a letter
        of its own) and the statistics of the name, which count its calls."""
        base = f"{self.namespace}:{{{tag(name, self.hash_tags)}}}:"
        return self.make_key(f"{base}g:{name}"), self.make_key(f"{base}s:{name}")

    def _named_keys(self, name: str, letters: str, family: str) -> LockKeys:
        """The keys of ``name`` with the letters of its lock, queue, waiters and statistics."""
        # The tag comes first, so braces in the name or the prefix cannot change the slot.
        base = f"{self.namespace}:{{{tag(name, self.hash_tags)}}}:"
        lock, queue, waiters, stats = (self.make_key(f"{base}{each}:{name}") for each in letters)
        return LockKeys(lock, queue, waiters, stats, family=family)

    def _key_frame(self) -> tuple[str, str] | None:
        """The text the key function puts before and after a lock name, if it keeps names."""
        key = self.make_key(f"{self.namespace}:{{{'0' * TAG_LENGTH}}}:l:{NAME_MARK}")
        if key.count(NAME_MARK) != 1:
            return None
        before, after = key.split(NAME_MARK)
        return before[:-TAG_FRAME], after

    @property
    def lane(self) -> Lane | None:
        """The connections beside the pool that the scripts go on; None when every call stays
        in the pool (``backends/lane.py`` says when)."""
        return self._lane

    @property
    def listable(self) -> bool:
        """Whether lock names can be read back from keys (a hashing KEY_FUNCTION hides them)."""
        return self._frame is not None

    def scan_pattern(self, name_pattern: str, kind: str = "l") -> str:
        """A SCAN MATCH pattern for the lock keys (``kind`` "s": statistics keys) whose names
        match the glob ``name_pattern``."""
        frame = self._frame
        if frame is None:
            raise ImproperlyConfigured(
                f"The KEY_FUNCTION of cache {self.alias!r} does not keep key text, "
                "so held locks cannot be listed."
            )
        before, after = frame
        tag = "?" * TAG_LENGTH
        return f"{glob_escape(before)}{{{tag}}}:{kind}:{name_pattern}{glob_escape(after)}"

    def name_from_key(self, key: str) -> str | None:
        """The lock name inside a lock key found by :meth:`scan_pattern`; None when the key's
        hash tag is not its name's (someone else wrote it: no ``lock()`` reaches that key)."""
        assert self._frame is not None
        before, after = self._frame
        name = key[len(before) + TAG_FRAME : len(key) - len(after)]
        tag_at = len(before) + 1  # ``before`` ends with "<namespace>:"; then "{<tag>}:l:"
        return name if key[tag_at : tag_at + TAG_LENGTH] == tag(name, self.hash_tags) else None

    def kind_of_key(self, key: str) -> str:
        """The letter of a key found by :meth:`scan_pattern`: "l" a lock's, "m" the holders
        of a semaphore, "r" of a read/write lock, "g" a rate limit's, "s" statistics."""
        assert self._frame is not None
        return key[len(self._frame[0]) + TAG_FRAME - 2]

    def channel(self, process_id: str) -> str:
        """The pub/sub channel on which grants for one process arrive."""
        return self.make_key(f"{self.namespace}:wake:{process_id}")

    def script(self, script: ScriptName) -> LuaScript:
        """One of the lock's scripts, as this backend runs it."""
        return self._scripts[script]

    def parts(self, keys: LockKeys, script: ScriptName) -> list[tuple[Backend, LockKeys, str]]:
        """Where a call of ``script`` on ``keys`` goes, as (backend, keys, script): here (a
        quorum: to each of its primaries, with its own keys and script)."""
        return [(self, keys, script)]

    def one_script(self, keys: Sequence[LockKeys]) -> bool:
        """One server: one script may use the keys of any locks."""
        return True

    def listens_on(self) -> Sequence[Backend]:
        """Its grants arrive on its own channel."""
        return (self,)

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run one of the lock's scripts on the sync client; its reply."""
        keys = self._encoded(keys)
        try:
            return self._scripts[script].run(self._caller, keys, args)
        except errors.CONNECTION + errors.RESPONSE as exc:
            if not demoted(exc):
                raise
        # The server is a replica now (it wrote nothing): once more, on the current primary.
        self._follow_primary()
        return self._scripts[script].run(self._caller, keys, args)

    def _follow_primary(self) -> None:
        """Hang up on a demoted primary and ask the sentinels for the current one."""
        self.client.connection_pool.disconnect(inuse_connections=False)
        if self._lane is not None:
            self._lane.close()
        self.primary_address()

    async def arun(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """Run one of the lock's scripts on the running event loop's client; its reply."""
        client, keys = self.async_client(), self._encoded(keys)
        try:
            return await self._scripts[script].arun(client, keys, args)
        except errors.CONNECTION + errors.RESPONSE as exc:
            if isinstance(exc, errors.RESPONSE) and not demoted(exc):
                raise
            if demoted(exc):  # the server is a replica now (it wrote nothing)
                await self._afollow_primary(client)
            # Else a pooled connection that died while idle (the server restarted since): the
            # request never reached it. The asyncio pool does not look before it hands a
            # connection out, as the sync pool does: once more, on a new connection.
        return await self._scripts[script].arun(client, keys, args)

    def run_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run` followed by ``WAIT`` for :attr:`wait_replicas`, in one round trip; its
        reply, or LockNotReplicated when fewer replicas acknowledged in time."""
        commands = acked_commands(self._scripts[script], keys, args, self._wait)
        results = acked_results(self.client, commands)
        if isinstance(results[0], Exception) and demoted(results[0]):
            # The server is a replica now (it wrote nothing): once more, on the current primary.
            self._follow_primary()
            results = acked_results(self.client, commands)
        if self._short(results) and self.sentinel:
            with contextlib.suppress(Exception):  # a demoted primary lost its replicas
                self.primary_address()
        return acknowledged(script, results, *self._wait)

    async def arun_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run_acked` for async code."""
        client = self.async_client()
        commands = acked_commands(self._scripts[script], keys, args, self._wait)
        results = await aacked_results(client, commands)
        if isinstance(results[0], Exception) and demoted(results[0]):
            await self._afollow_primary(client)  # as run_acked: a replica now, it wrote nothing
            results = await aacked_results(client, commands)
        if self._short(results) and self.sentinel:
            with contextlib.suppress(Exception):  # as run_acked, without blocking the loop
                await self._afollow_primary(client)
        return acknowledged(script, results, *self._wait)

    @property
    def _wait(self) -> tuple[int, int]:
        """The replicas to wait for, and for how long (ms)."""
        return self.wait_replicas, self.wait_timeout_ms

    def _short(self, results: list[Any]) -> bool:
        """Whether fewer replicas than needed acknowledged the script (its error raised)."""
        for result in results:
            if isinstance(result, Exception):
                if self.sentinel and isinstance(result, errors.READ_ONLY):
                    # A demoted primary, and a client that does not hang up on READONLY by
                    # itself (redis-py 5): the next call asks the sentinels again.
                    with contextlib.suppress(Exception):
                        self.client.connection_pool.disconnect(inuse_connections=False)
                        self.primary_address()
                raise result
        return int(results[1]) < self.wait_replicas

    def queue(
        self, pipe: Any, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> None:
        """Queue a script in a pipeline (see :meth:`load`: a pipeline cannot load it)."""
        pipe.execute_command("EVALSHA", self._scripts[script].sha, len(keys), *keys, *args)

    def load(self, script: ScriptName) -> None:
        """Make sure the server knows a script, before pipelines that run it."""
        self.client.script_load(self._scripts[script].source)

    def check_async(self) -> None:
        """ImproperlyConfigured when an asyncio client cannot do what the cache's client does
        (without connecting)."""
        async_options(self.client.connection_pool)

    def _make_async_client(self) -> Client:
        return async_client_for(self.client)

    def async_client(self) -> Client:
        """The asyncio client for the running event loop (one per loop).

        Clients of loops that have closed (``asyncio.run`` and ``async_to_sync`` make one loop
        per call) are dropped and hung up when a new loop needs one, so they do not pile up.
        """
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            with self._async_mutex:
                self._drop_closed()
                client = self._async[loop] = self._make_async_client()
        return client

    def _drop_closed(self) -> None:
        """Hang up the async clients of closed event loops (called with the mutex held)."""
        for loop in [loop for loop in self._async if loop.is_closed()]:
            hang_up(self._async.pop(loop))

    async def _afollow_primary(self, client: Client) -> None:
        """:meth:`primary_address` through ``client``'s Sentinel pool, awaited: the pool drops
        its connections to a demoted primary, and so do the other loops' clients."""
        host, port = await client.connection_pool.get_master_address()
        self.note_primary((str(host), int(port)))

    def primary_address(self) -> tuple[str, int] | None:
        """Of a Sentinel backend, the primary's address the sentinels give now (a round trip
        to them); None for a server that cannot move.

        redis-py does not follow a failover by itself (it watches no ``+switch-master``): a
        pooled connection keeps talking to a demoted primary, which stays writable for
        seconds. Asking here makes the pool hang up its connections to an older primary
        (redis-py's pool does that when the address it knows changes), and so do the async
        clients (:meth:`note_primary`).
        """
        if not self.sentinel:
            return None
        pool = self.client.connection_pool
        host, port = pool.get_master_address()
        address = (str(host), int(port))
        self.note_primary(address)
        return address

    def close(self) -> None:
        """Hang up the async clients of closed event loops: this backend is dropped (the
        settings changed), and the others close with their loops."""
        with self._async_mutex:
            self._drop_closed()
        if self._lane is not None:
            self._lane.close()

    def note_primary(self, address: tuple[str, int]) -> None:
        """The primary is at ``address`` now: hang up the async clients connected to another
        one, so that the next async lock call reaches the new primary."""
        with self._async_mutex:
            for loop, client in list(self._async.items()):
                known = getattr(client.connection_pool, "master_address", None)
                if known is not None and tuple(known) != address:
                    hang_up(self._async.pop(loop))

    def primaries(self) -> list[Client]:
        """The servers whose keys a listing reads with SCAN, always in the same order: the one
        primary of a single server or a Sentinel service."""
        return [client for _, client in self.primaries_by_slot()]

    def primaries_by_slot(self) -> list[tuple[int, Client]]:
        """:meth:`primaries` with the first hash slot each serves (0 for a single server):
        what a page cursor names a server by, as it survives a failover."""
        return [(0, self.client)]

    def servers(self) -> list[tuple[str, Any]]:
        """The servers that grant this alias's locks, as (cache alias, connection pool): the
        primary (the one Sentinel names now), or each primary of a cluster."""
        return [(self.alias, client.connection_pool) for client in self.primaries()]

    def refresh(self) -> None:
        """Learn the servers again after a call to one of :meth:`primaries` failed (a cluster's
        nodes); a single server or a Sentinel service has nothing to learn."""

    def sharded_wake_ups(self) -> bool:
        """Whether waiters are woken with sharded pub/sub, on the node of their lock's slot
        (a cluster's, ``cluster.py``); one server's are woken on one channel per process."""
        return False

    def own_connection(self, read_timeout: float) -> Any:
        """A connection of its own to the primary, configured like the cache's (address,
        auth, TLS, Sentinel) but outside its pool, reading with ``read_timeout``."""
        return connection_of(self.client.connection_pool, read_timeout)
