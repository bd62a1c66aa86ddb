"""The connections of the sharded wake-ups (``shards.py``): one to each primary of a cluster
whose slots a process waits on, with the channels subscribed there (:class:`Subscriptions`)."""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import text_of
from django_redis_lock.backends.cluster import ClusterLockBackend
from django_redis_lock.backends.wire import NOTHING, Replies, replies_of

logger = logging.getLogger("django_redis_lock")

#: The first pause before a node that failed is connected again (it doubles from there).
FIRST_BACKOFF_SECONDS = 0.1
# The longest such pause, and the least time between two questions to the cluster about
# where the slots are.
_MAX_BACKOFF_SECONDS = 0.5
#: The longest one read lasts: how often the connections' health is looked at.
TICK_SECONDS = 1.0
# A quiet connection is PINGed after this long, and given up when the PONG takes as long.
_HEALTH_SECONDS = 5.0
# Replies read from one connection in a row before the others get their turn.
_MAX_READS = 1000


class Shard:
    """The thread's connection to one primary, and the channels it subscribes there."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.name: str = node.name
        self.connection: Any = None
        self.replies: Replies | None = None
        self.sock: socket.socket | None = None
        #: Channels to be subscribed here; ``confirmed``: those the node confirmed.
        self.channels: set[str] = set()
        self.confirmed: set[str] = set()
        #: Channels this side unsubscribed: their ``sunsubscribe`` is no slot move.
        self.leaving: set[str] = set()
        self.backoff = FIRST_BACKOFF_SECONDS
        self.retry_at = 0.0
        self.heard = 0.0
        self.pinged: float | None = None

    def send(self, *command: str) -> None:
        assert self.connection is not None
        self.connection.send_command(*command)

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.disconnect()
        self.connection = self.replies = self.sock = None
        self.confirmed.clear()
        self.leaving.clear()


class Subscriptions:
    """The shards of one listener and the channels subscribed on each: routed to the node
    that serves each channel's slot, followed when slots move, nodes fail or fail over.
    Used by one thread at a time, whichever holds the listener's right to read.

    ``heard`` gets each published message; ``confirmed`` each channel whose subscription a
    node confirmed (its waiters look again: a grant sent before was not heard)."""

    def __init__(
        self,
        backend: ClusterLockBackend,
        bell: socket.socket,
        heard: Callable[[bytes | str], None],
        confirmed: Callable[[str], None],
    ) -> None:
        self._backend, self._bell = backend, bell
        self._heard, self._confirmed = heard, confirmed
        # Shards by node name, and the shard each wanted channel went to.
        self._shards: dict[str, Shard] = {}
        self._homes: dict[str, Shard] = {}
        #: Something to look at before the next read: the bell rang, a connection failed, a
        #: channel lost its node.
        self.changed = True
        self._outage = False
        self._asked_at = 0.0

    def settle(self, wanted: set[str]) -> None:
        """Bring the subscriptions in line with the ``wanted`` channels: let go of unwanted
        ones, send new ones to the node of their slot, connect the shards that need it."""
        self.changed = False
        for channel, shard in list(self._homes.items()):
            if channel not in wanted:
                del self._homes[channel]
                shard.channels.discard(channel)
                if channel in shard.confirmed and shard.connection is not None:
                    shard.confirmed.discard(channel)
                    shard.leaving.add(channel)
                    self._send(shard, "SUNSUBSCRIBE", channel)
        homeless = [channel for channel in wanted if channel not in self._homes]
        if homeless:
            self._route(homeless)
        now = time.monotonic()
        for name, shard in list(self._shards.items()):
            if not shard.channels:
                shard.close()
                del self._shards[name]
            elif shard.connection is None and now >= shard.retry_at:
                self._connect(shard)
            elif shard.connection is not None:
                self._health(shard, now)

    def _route(self, channels: list[str]) -> None:
        """Give each channel to the shard of the node that serves its slot (subscribed at
        once where connected); a channel whose node is unknown waits for the next look."""
        for channel in channels:
            try:
                node = self._backend.node_of(channel)
            except errors.CLIENT as exc:
                logger.debug("No node known for wake-up channel %s: %s", channel, exc)
                self._ask_cluster()
                continue
            shard = self._shards.get(node.name)
            if shard is None:
                shard = self._shards[node.name] = Shard(node)
            shard.channels.add(channel)
            self._homes[channel] = shard
            if shard.connection is not None:
                shard.leaving.discard(channel)
                self._send(shard, "SSUBSCRIBE", channel)

    def _ask_cluster(self) -> None:
        """Learn the slots again, at most every _MAX_BACKOFF_SECONDS."""
        now = time.monotonic()
        if now - self._asked_at >= _MAX_BACKOFF_SECONDS:
            self._asked_at = now
            self._backend.refresh()

    def _connect(self, shard: Shard) -> None:
        try:
            connection = self._backend.node_connection(shard.node, TICK_SECONDS)
            connection.connect()
            shard.connection = connection
            shard.replies = replies_of(connection, TICK_SECONDS)
            shard.sock = connection._sock  # noqa: SLF001  the client keeps its socket there: select() needs it
            shard.heard, shard.pinged = time.monotonic(), None
            for channel in sorted(shard.channels):  # one slot per SSUBSCRIBE
                shard.send("SSUBSCRIBE", channel)
        except Exception as exc:  # refused, reset, a node gone: after a pause, ask again
            self._lost(shard, exc)

    def _send(self, shard: Shard, *command: str) -> None:
        try:
            shard.send(*command)
        except Exception as exc:
            self._lost(shard, exc)

    def _health(self, shard: Shard, now: float) -> None:
        """PING a connection quiet for long; give it up when the PONG is late."""
        if shard.pinged is not None and now - shard.pinged > _HEALTH_SECONDS:
            self._lost(shard, ConnectionError("no answer to PING on the wake-up channel"))
        elif shard.pinged is None and now - shard.heard > _HEALTH_SECONDS:
            shard.pinged = now
            self._send(shard, "PING")

    def _lost(self, shard: Shard, exc: BaseException) -> None:
        """The connection failed: its channels go back to be routed afresh (the slots may
        have moved) once the cluster is asked again; the node after a pause."""
        if self._outage:
            logger.debug("Sharded wake-up channel still away (%s); reconnecting.", exc)
        else:
            self._outage = True
            logger.warning("Sharded wake-up channel lost (%s); reconnecting.", exc)
        shard.close()
        shard.retry_at = time.monotonic() + shard.backoff
        shard.backoff = min(shard.backoff * 2, _MAX_BACKOFF_SECONDS)
        self._unhome(shard, set(shard.channels))
        self._ask_cluster()

    def _unhome(self, shard: Shard, channels: set[str]) -> None:
        self.changed = True  # they are routed again at the next look
        for channel in channels:
            shard.channels.discard(channel)
            shard.confirmed.discard(channel)
            if self._homes.get(channel) is shard:
                del self._homes[channel]

    def pause(self, wanted: set[str]) -> float:
        """How long until the next look: a tick, less while a channel has no home or a
        shard waits to connect."""
        if any(channel not in self._homes for channel in wanted):
            return FIRST_BACKOFF_SECONDS
        pending = [s.retry_at for s in self._shards.values() if s.connection is None]
        if pending:
            return max(0.0, min(TICK_SECONDS, min(pending) - time.monotonic()))
        return TICK_SECONDS

    def settled(self, wanted: set[str]) -> bool:
        """Whether every ``wanted`` channel is confirmed on a connected shard, and nothing
        changed since: then only messages can come, and a waiter may read them."""
        if self.changed:
            return False
        for channel in wanted:
            shard = self._homes.get(channel)
            if shard is None or shard.sock is None or channel not in shard.confirmed:
                return False
        return True

    def catch_up(self) -> None:
        """Act on what came on every connection meanwhile, without waiting."""
        for shard in list(self._shards.values()):
            if shard.sock is not None:
                self._drain(shard)

    def close(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self._shards.clear()
        self._homes.clear()

    def read(self, seconds: float) -> None:
        """Wait up to ``seconds`` for a reply on any connection (or the bell), and act on
        what came."""
        by_socket = {shard.sock: shard for shard in self._shards.values() if shard.sock}
        try:
            ready, _, _ = select.select([self._bell, *by_socket], [], [], seconds)
        except (OSError, ValueError):  # a socket closed meanwhile: look again
            ready = list(by_socket)
        for sock in ready:
            if sock is self._bell:
                self.changed = True
                with contextlib.suppress(OSError):
                    self._bell.recv(4096)
            else:
                self._drain(by_socket[sock])

    def _drain(self, shard: Shard) -> None:
        """Act on every reply already there on ``shard``'s connection."""
        for _ in range(_MAX_READS):
            replies = shard.replies
            if replies is None:
                return
            try:
                reply = replies.read(0)
            except Exception as exc:
                if errors.elsewhere(exc):
                    self._moved(shard, exc)
                    continue
                self._lost(shard, exc)
                return
            if reply is NOTHING:
                return
            shard.heard, shard.pinged = time.monotonic(), None
            self._act(shard, reply)

    def _act(self, shard: Shard, reply: Any) -> None:
        kind = text_of(reply[0]) if isinstance(reply, list) and reply else ""
        if kind == "smessage" and len(reply) >= 3:
            self._heard(reply[2])
        elif kind == "ssubscribe" and len(reply) >= 2:
            channel = text_of(reply[1])
            shard.confirmed.add(channel)
            shard.backoff = FIRST_BACKOFF_SECONDS
            if self._outage:
                self._outage = False
                logger.info("Sharded wake-up channel is back.")
            with contextlib.suppress(*errors.CLIENT):
                self._backend.note_served(channel, shard.node)  # its waiters' calls go there
            self._confirmed(channel)  # a grant sent before this was not heard
        elif kind == "sunsubscribe" and len(reply) >= 2:
            channel = text_of(reply[1])
            if channel in shard.leaving:
                shard.leaving.discard(channel)
            else:  # the node let the slot go (moved, or the node is a replica now)
                logger.info("Wake-up channel %s moves with its slot.", channel)
                self._unhome(shard, {channel})
                self._ask_cluster()

    def _moved(self, shard: Shard, exc: Exception) -> None:
        """An SSUBSCRIBE went to a node that does not serve the slot: the channels of this
        shard not yet confirmed are routed again once the cluster is asked where slots are."""
        logger.debug("Wake-up channel redirected: %s", exc)
        self._unhome(shard, shard.channels - shard.confirmed)
        self._asked_at = 0.0
        self._ask_cluster()
