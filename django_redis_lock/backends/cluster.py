"""Locks on a Redis Cluster (or Valkey cluster): django-valkey's ``ClusterValkeyCache``.

The lock's scripts run there unchanged: every key of a lock carries the same hash tag, so a
script's keys share a slot, and the cluster client sends it to the primary of that slot
(following MOVED after a failover, and reloading a script a promoted replica does not know).
What differs from one server:

- listing reads every primary with SCAN, in slot order, and READs keys one per command (a
  script's keys must share a slot), pipelined per node;
- waiters are woken with sharded pub/sub where every primary has it (Redis 7+, Valkey): a
  waiter's channel is its process's for that lock, in the lock's slot, and the release
  SPUBLISHes the grant there, so the message stays on the lock's shard
  (``runtime/shards.py`` subscribes on the node that owns the slot). Where a primary lacks
  it, or REDIS_LOCK["CLUSTER_WAKE_UPS"] is "classic", grants are PUBLISHed classically,
  which the cluster bus carries to every node, and the listener subscribes on any one node
  and moves to another when that one fails;
- the asyncio client is a cluster client of its own, built from the sync one's nodes and
  options (django-valkey has none for a cluster);
- ``WAIT`` cannot go in one pipeline with a script here (a cluster pipeline sends a keyless
  command to a node of its choosing), so REDIS_LOCK["WAIT_REPLICAS"] is refused.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.core.cache import BaseCache
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock import scripts
from django_redis_lock.backends import errors
from django_redis_lock.backends.base import EncodedKeys, LockKeys, connection_of, flat_lists
from django_redis_lock.backends.clients import (
    Client,
    library_class,
    library_of,
    portable_options,
    refuse_async,
)
from django_redis_lock.backends.lane import Lane, lane_for
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.scripts import ScriptName

# What a script's call on a lane leaves to the cluster client: a node that failed (it learns
# the slots again), or (an error reply that errors.elsewhere tells apart) sent the call
# elsewhere. Not a timeout: the call's outcome is unknown, and the lock settles it.
_FALL_BACK = errors.CONNECTION + errors.RESPONSE + errors.CLUSTER_AWAY
#: What starts a waiter's channel that the release SPUBLISHes to (see scripts/queue.py, wake).
SHARDED_MARK = "\x00"

# The number of hash slots of a cluster.
_SLOTS = 16384
# Options of the sync cluster client's connections that the asyncio cluster client sets by
# itself, or that are sync-only plumbing: not the user's choices.
_CLUSTER_PLUMBING = frozenset(
    {"host", "port", "retry", "redis_connect_func", "valkey_connect_func", "connection_class"}
)


class ClusterLockBackend(LockBackend):
    """A :class:`LockBackend` over a cluster client (valkey-py's ``ValkeyCluster``)."""

    def __init__(self, alias: str, cache: BaseCache, client: Client) -> None:
        super().__init__(alias, cache, client)
        if self.wait_replicas:
            raise ImproperlyConfigured(
                f"REDIS_LOCK['WAIT_REPLICAS'] cannot be used with the cluster cache {alias!r}: "
                "a cluster pipeline cannot send WAIT to the node that ran the lock's script. "
                "Set it to 0 for cluster caches (see the README, Redis Cluster and Valkey)."
            )
        self._subscribe_at = itertools.count()
        self._nodes_mutex = threading.Lock()
        # The nodes known at the start: the client forgets nodes that failed, and would know
        # none after an outage of the whole cluster.
        self._seeds = [(node.host, node.port) for node in client.get_nodes()]
        # A lane beside the pool of each primary the scripts went to, by node name (None: the
        # node's calls stay in its pool), and the hash slot of each key tuple.
        self._cache = cache
        self._lanes: dict[str, Lane | None] = {}
        self._slots: dict[tuple[str | bytes, ...], int] = {}
        # Whether every primary has SPUBLISH: asked at the first wait (None: not known yet).
        self._sharded: bool | None = None

    def one_script(self, keys: Sequence[LockKeys]) -> bool:
        """Whether the locks' keys share a slot: each lock's keys have a slot of their own,
        shared only by names with one hash tag under REDIS_LOCK["HASH_TAGS"]."""
        return len({int(self.client.keyslot(each.lock)) for each in keys}) == 1

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run one of the lock's scripts on the primary of its keys' slot: through a lane of
        that node where it may have one (``backends/lane.py``: the cluster client's routing
        and pool cost about half an uncontended call again), else, and whenever the node
        sends the call elsewhere (MOVED, ASK, the cluster failing over) or cannot be reached,
        through the cluster client, which follows the cluster as it changes."""
        encoded = self._encoded(keys)
        lane = self._lane_of(keys)
        if lane is not None:
            try:
                return self._scripts[script].run(lane, encoded, args)
            except _FALL_BACK as exc:
                if isinstance(exc, errors.RESPONSE) and not errors.elsewhere(exc):
                    raise  # the script's own error: the cluster client would get it too
        return self._scripts[script].run(self.client, encoded, args)

    def run_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run`: a cluster alias has no REDIS_LOCK["WAIT_REPLICAS"] (refused above)."""
        return self.run(script, keys, args)

    def _lane_of(self, keys: Sequence[str | bytes]) -> Lane | None:
        """The lane of the primary that serves ``keys``' slot now (as the cluster client
        knows it), made at its first call; None when the node's calls stay in its pool."""
        slot = self._slots.get(keys) if isinstance(keys, tuple) else None
        if slot is None:
            slot = int(self.client.keyslot(keys[0]))
            if isinstance(keys, tuple):
                if len(self._slots) >= EncodedKeys.LIMIT:
                    self._slots.clear()
                self._slots[keys] = slot
        try:
            node = self.client.nodes_manager.get_node_from_slot(slot)
        except errors.CLIENT:  # no node serves it now: the cluster client says so
            return None
        name: str = node.name
        if name not in self._lanes:
            self._lanes[name] = lane_for(self.client.get_valkey_connection(node), self._cache)
        return self._lanes[name]

    def close(self) -> None:
        super().close()
        for lane in list(self._lanes.values()):
            if lane is not None:
                lane.close()

    def read(self, keys: Sequence[str | bytes]) -> list[Any]:
        """READ of ``keys``, one key per command (keys of other slots cannot share a script),
        pipelined: the cluster client sends each node its own in one round trip."""
        return [value for reply in self._each("read", keys) for value in reply]

    def read_shared(self, keys: Sequence[str | bytes]) -> list[Any]:
        """:meth:`LockBackend.read_shared`, one key per command, as :meth:`read`."""
        return [each for reply in self._each("shared_read_many", keys) for each in reply]

    def read_rates(self, keys: Sequence[str | bytes]) -> list[Any]:
        """:meth:`LockBackend.read_rates`, one key per command, as :meth:`read`."""
        return [each or None for reply in self._each("rate_read_many", keys) for each in reply]

    def read_stats(self, keys: Sequence[str | bytes]) -> list[list[Any]]:
        """:meth:`LockBackend.read_stats`, one key per command, as :meth:`read`."""
        return flat_lists([each for reply in self._each("stats_read_many", keys) for each in reply])

    def _each(self, script: ScriptName, keys: Sequence[str | bytes]) -> list[list[Any]]:
        """The decoded JSON reply of ``script`` run on each key alone, pipelined."""
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                self.queue(pipe, script, [key], ())
            replies = pipe.execute(raise_on_error=False)
            if attempt or not any(isinstance(reply, errors.NO_SCRIPT) for reply in replies):
                break
            self.load(script)  # a promoted replica, or a restarted node, lost the script
        decoded: list[list[Any]] = []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            decoded.append(scripts.decode_read(reply))
        return decoded

    def check_async(self) -> None:
        _async_cluster_options(self.client)

    def _make_async_client(self) -> Client:
        options = _async_cluster_options(self.client)
        aio = importlib.import_module(f"{library_of(self.client).__name__}.asyncio.cluster")
        nodes = [aio.ClusterNode(node.host, node.port) for node in self.client.get_nodes()]
        # The asyncio twin of the library's sync cluster class has its name (ValkeyCluster).
        return getattr(aio, library_class(self.client).__name__)(startup_nodes=nodes, **options)

    def primaries_by_slot(self) -> list[tuple[int, Client]]:
        """A client of each primary with the first slot it serves, in slot order: both stay
        the same when a replica takes over its primary's slots."""
        first: dict[str, int] = {}
        for slot, nodes in self.client.nodes_manager.slots_cache.items():
            if nodes and slot < first.get(nodes[0].name, _SLOTS):
                first[nodes[0].name] = slot
        primaries = self._known(self.client.get_primaries)
        found = [(first.get(node.name, _SLOTS), node) for node in primaries]
        found.sort(key=lambda pair: pair[0])
        return [(slot, self.client.get_valkey_connection(node)) for slot, node in found]

    def refresh(self) -> None:
        """Ask the cluster for its nodes again: a call to a node failed (the client learns a
        failover by itself only from calls it routes, not from calls to one node)."""
        with contextlib.suppress(*errors.CLIENT):
            self._known(self.client.get_nodes)
            self.client.nodes_manager.initialize()

    def sharded_wake_ups(self) -> bool:
        """Whether waiters are woken with sharded pub/sub: REDIS_LOCK["CLUSTER_WAKE_UPS"] is
        "auto" and every primary knows SPUBLISH (Redis 7+, Valkey). Asked once; a cluster that
        cannot answer now is asked again next time (classic wake-ups meanwhile). A setting
        the system check refuses (E018) reads as "auto", with an error logged."""
        if lock_settings.wake_ups == "classic":
            return False
        if self._sharded is None:
            try:
                self._sharded = not self.without_spublish()
            except errors.CLIENT:
                return False
        return self._sharded

    def without_spublish(self) -> list[str]:
        """The primaries (host:port) that have no sharded pub/sub (Redis before 7), asked now:
        while there is one, grants are PUBLISHed classically. A client error when the cluster
        cannot answer."""
        return [
            f"{node.host}:{node.port}"
            for node in self._known(self.client.get_primaries)
            if not _knows_spublish(self.client.get_valkey_connection(node))
        ]

    def wake_channel(self, keys: LockKeys, process_id: str) -> str:
        """The channel on which waiters of ``keys`` in process ``process_id`` are woken with
        sharded pub/sub: in the slot of the lock's keys (its text starts as the lock's key
        does, hash tag included), which a script may SPUBLISH to."""
        return f"{keys.lock}:wake:{process_id}"

    def node_of(self, channel: str) -> Any:
        """The primary that serves ``channel``'s slot, as the cluster client knows it now."""
        return self.client.nodes_manager.get_node_from_slot(self.client.keyslot(channel))

    def note_served(self, channel: str, node: Any) -> None:
        """``node`` confirmed a subscription in ``channel``'s slot, so it serves that slot:
        where the client still routes it elsewhere (it learned the slots from a node that had
        not heard of a failover yet), it routes there from now on, as after a MOVED reply."""
        if self.node_of(channel).name == node.name:
            return
        moved = importlib.import_module(f"{library_of(self.client).__name__}.exceptions")
        slot = self.client.keyslot(channel)
        self.client.nodes_manager.update_moved_exception(
            moved.MovedError(f"{slot} {node.host}:{node.port}")
        )

    def node_connection(self, node: Any, read_timeout: float) -> Any:
        """A connection of its own to ``node``, configured like the cluster's connections."""
        pool = self.client.get_valkey_connection(node).connection_pool
        return connection_of(pool, read_timeout)

    def own_connection(self, read_timeout: float) -> Any:
        """A connection of its own to a node of the cluster, the next one each time: classic
        pub/sub messages reach every node, and a listener whose node failed moves on."""
        with self._nodes_mutex:
            nodes = sorted(self._known(self.client.get_nodes), key=lambda node: node.name)
            node = nodes[next(self._subscribe_at) % len(nodes)]
            pool = self.client.get_valkey_connection(node).connection_pool
        return connection_of(pool, read_timeout)

    def _known(self, nodes_of: Callable[[], list[Any]]) -> list[Any]:
        """``nodes_of()``; when the client knows no node any more, after the cluster was away,
        it learns them again from the first nodes, or a client error says it cannot."""
        found = list(nodes_of())
        if found:
            return found
        library = library_of(self.client).__name__
        manager = self.client.nodes_manager
        node_class = importlib.import_module(f"{library}.cluster").ClusterNode
        for host, port in self._seeds:
            seed = node_class(host, port)
            manager.startup_nodes[seed.name] = seed
        manager.initialize()  # raises the client's error while no seed answers
        found = list(nodes_of())
        if not found:
            raise importlib.import_module(f"{library}.exceptions").ConnectionError(
                f"no node of the cluster of cache {self.alias!r} is known"
            )
        return found


def _knows_spublish(client: Client) -> bool:
    """Whether the server of ``client`` has sharded pub/sub: Redis 7 and later (Valkey says
    7.2.4 there). From INFO, which every client library version parses alike (older
    valkey-py releases fail on their own parse of COMMAND INFO)."""
    version = str(client.info("server").get("redis_version", ""))
    major = version.partition(".")[0]
    return major.isdigit() and int(major) >= 7


def _async_cluster_options(client: Client) -> dict[str, Any]:
    """The options of an asyncio cluster client that does what ``client``'s connections do,
    or ImproperlyConfigured naming what it cannot do alike."""
    kwargs = client.nodes_manager.connection_kwargs
    options, refused = portable_options(
        {
            key: value
            for key, value in kwargs.items()
            if key not in _CLUSTER_PLUMBING and key != "max_connections"
        }
    )
    if kwargs.get("connection_class", None) not in (None, library_of(client).Connection):
        if kwargs["connection_class"] is getattr(library_of(client), "SSLConnection", None):
            options["ssl"] = True
        else:
            refused.append(f"connection_class={kwargs['connection_class'].__qualname__}")
    options.pop("path", None)
    options.pop("db", None)
    # What the sync client keeps for the whole cluster rather than per connection.
    manager = client.nodes_manager
    options.update(
        address_remap=manager.address_remap,
        require_full_coverage=manager._require_full_coverage,  # noqa: SLF001  redis-py keeps these cluster options only on its manager
        dynamic_startup_nodes=manager._dynamic_startup_nodes,  # noqa: SLF001  redis-py keeps these cluster options only on its manager
        read_from_replicas=client.read_from_replicas,
        reinitialize_steps=client.reinitialize_steps,
        cluster_error_retry_attempts=client.cluster_error_retry_attempts,
    )
    if "max_connections" in kwargs:
        options["max_connections"] = kwargs["max_connections"]
    # The sync client's own: retries (its default makes none) and a connect hook of the user.
    if getattr(getattr(client, "retry", None), "_retries", 0):
        refused.append("retry")
    if getattr(client, "user_on_connect_func", None) is not None:
        refused.append("valkey_connect_func")
    refuse_async(refused)
    return options
