"""The lock's own connections to one server, beside the cache's pool: a lane for its scripts.

A call through the client's pool pays, on every command, for the pool's bookkeeping: a look
at the process id (twice), a mutex (twice), a ``poll`` for unread data, the client library's
events and observability hooks. On a small machine that is about a fifth of a script call's
time, and a lock cycle is two of them. A :class:`Lane` keeps connections configured exactly
like the pool's (the same class and options: address, database, credentials, TLS, timeouts,
retries, health checks) in a free list of its own: a call takes one, sends, reads, and puts it
back, packing the script's command itself (``backends/wire.py``: a lock's dozen arguments
cost the client's general packer twice as much). What the pool guards against, the lane
guards against too:

- a connection that died while idle, or has unread data, is found by a ``poll`` before it is
  used and replaced (as the pool does, where redis-py 8 does not skip that look);
- a call that fails or is interrupted midway (a timeout, a signal, a cancelled greenlet) leaves
  its connection hung up by the client library, so no late reply is ever read as the next
  call's;
- a forked child never uses its parent's connections (the list is emptied in the child);
- the client's retry policy applies, as it does to the pool's commands.

Behind Sentinel, a connection follows the primary as the pool's do: it asks the sentinels
where the primary is when it connects, and one connected to another server than the pool
last learned of (a failover) is hung up before it is used, as the pool hangs up its own.

It holds at most one connection per thread calling at once, as the pool would, and no more
than the pool may make (its ``max_connections``; calls beyond go through the pool); they live
as long as the backend (``close()`` hangs them up). A blocking pool (the project bounds its
waits on connections), a pool with a client-side cache, a credential provider (the pool
re-authenticates the connections it knows when a token is renewed), single-connection
clients, a client whose ``execute_command`` is not its library's own (an instrumentation such
as OpenTelemetry's or Sentry's wraps it to see every command, a subclass replaces it) and a
cache that hangs its connections up after each request (CLOSE_CONNECTION) keep every call in
the pool: :func:`lane_for` says which.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any

from django.core.cache import BaseCache

from django_redis_lock.backends import errors
from django_redis_lock.backends.clients import (
    Client,
    closes_connections,
    instance_of,
    is_sentinel_pool,
    library_code,
)
from django_redis_lock.backends.wire import pack_command

# Pools whose connections a lane may copy: the plain ones of both libraries (and subclasses).
_PLAIN_POOLS = ("redis.connection.ConnectionPool", "valkey.connection.ConnectionPool")
# Their subclasses that keep every call in the pool: bounded.
_POOLS_KEPT = (
    "redis.connection.BlockingConnectionPool",
    "valkey.connection.BlockingConnectionPool",
)
# What a look at an idle connection raises when it died.
_DEAD: tuple[type[Exception], ...] = (OSError, *errors.CONNECTION, *errors.TIMEOUT)

_LANES: weakref.WeakSet[Lane] = weakref.WeakSet()


def lane_for(client: Client, cache: BaseCache) -> Lane | None:
    """A lane beside the pool of ``client`` (``cache``'s), or None when its calls must stay in
    the pool."""
    if closes_connections(cache):  # the project wants no connection kept between requests
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(client, "connection", None) is not None:
        return None
    if not instance_of(pool, *_PLAIN_POOLS) or instance_of(pool, *_POOLS_KEPT):
        return None
    options = getattr(pool, "connection_kwargs", None)
    if not isinstance(options, dict) or getattr(pool, "cache", None) is not None:
        return None
    if options.get("credential_provider") is not None:  # the pool re-authenticates its own
        return None
    # Code that wraps or replaces the client's execute_command (an instrumentation, to see
    # every command; a subclass) sees the lock's calls only through the pool. Looked at when
    # the backend is made: an instrumentation set up later does not see the lock's scripts.
    if not library_code(getattr(type(client), "execute_command", None)):
        return None
    return Lane(client)


class Lane:
    """Connections configured like ``client``'s pool's, outside it, in a free list (see the
    module); at most as many as the pool may make, calls beyond them go through the pool."""

    __slots__ = ("__weakref__", "_client", "_follows", "_idle", "_made", "_mutex", "_pool")

    def __init__(self, client: Client) -> None:
        self._client = client
        self._pool = client.connection_pool
        # A Sentinel pool, whose primary the connections follow; None for one server.
        self._follows = self._pool if is_sentinel_pool(self._pool) else None
        # list.pop and list.append are atomic: no mutex on the way to the server.
        self._idle: list[Any] = []
        self._made = 0
        self._mutex = threading.Lock()  # only to count the connections made
        _LANES.add(self)

    def execute_command(self, *command: Any) -> Any:
        """Send ``command`` on a connection of the lane, with the connection's retry policy;
        the server's reply (an error reply raised, as by the client)."""
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._new()
            if connection is None:  # as many as the pool may have are busy: the pool's turn
                return self._client.execute_command(*command)
        try:
            _ready(connection, self._follows)
            return connection.retry.call_with_retry(
                lambda: _call(connection, command), lambda _: connection.disconnect()
            )
        finally:
            self._idle.append(connection)

    @property
    def made(self) -> int:
        """The connections the lane has now, busy or idle."""
        return self._made

    def _new(self) -> Any:
        """A new connection, or None when the lane has as many as the pool may make."""
        with self._mutex:
            if self._made >= self._pool.max_connections:
                return None
            self._made += 1
        return self._pool.connection_class(**self._pool.connection_kwargs)

    def close(self) -> None:
        """Hang up the idle connections (those in use come back to the lane after their call,
        and are looked at before the next)."""
        idle, self._idle = self._idle, []
        with self._mutex:
            self._made -= len(idle)
        for connection in idle:
            with contextlib.suppress(Exception):
                connection.disconnect()

    def drop_after_fork(self) -> None:
        """In a forked child: drop the parent's connections, unused (the parent's sockets are
        not shut down: the client library only closes them in another process)."""
        self._idle, self._made, self._mutex = [], 0, threading.Lock()


def _ready(connection: Any, follows: Any) -> None:
    """Hang up a connected ``connection`` that died while idle or holds unread data, as the
    pool does before it hands one out, or (``follows``: its Sentinel pool) one connected to
    another server than the primary the pool knows now, as the pool does when it takes one
    back. :func:`_call` connects it again."""
    if getattr(connection, "_sock", None) is None:
        return
    if follows is not None:
        primary = getattr(follows, "master_address", None)
        if primary is not None and primary != (connection.host, connection.port):
            connection.disconnect()
            return
    try:
        if not connection.can_read():
            return
    except _DEAD:
        pass
    connection.disconnect()


def _call(connection: Any, command: tuple[Any, ...]) -> Any:
    # Connected here, once per attempt: a Sentinel-managed connection finds the primary in
    # connect(), where redis-py 8 connects one that sends unconnected to the address it had.
    if getattr(connection, "_sock", None) is None:
        connection.connect()
    encoder = connection.encoder
    packed = pack_command(command, encoder.encoding, encoder.encoding_errors)
    connection.send_packed_command([packed])
    return connection.read_response()


def _forget_all() -> None:
    for lane in list(_LANES):
        lane.drop_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all)
