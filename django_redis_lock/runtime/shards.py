"""Wake-ups on a Redis 7+ cluster: sharded pub/sub, one connection per shard a process waits on.

A classic PUBLISH on a cluster is carried by the cluster bus to every node, so each hand-over
costs a message per node. Where every primary has sharded pub/sub, a waiter's channel is its
process's channel for that lock, in the lock's slot (``ClusterLockBackend.wake_channel``), and
the release SPUBLISHes the grant there: the message stays on the shard that owns the slot.

One thread per process (:class:`ShardedListener`) keeps a connection to each primary whose
slots its waiters wait on, and reads them all (``select``). A channel is subscribed
(SSUBSCRIBE) when a waiter first waits on it, and kept after its last waiter left, up to
:data:`IDLE_CHANNELS` of them, so that the next wait on a busy lock needs no subscription of
its own. When a subscription is confirmed, the waiters on its channel are woken to look again:
a grant published before it was not heard.

Slot moves and failovers: a node that loses a slot tells its subscribers (an ``sunsubscribe``
of each of the slot's channels), a subscription sent to a node that does not serve the slot is
refused with MOVED, and a connection that fails takes its node's channels with it. Each time,
the listener asks the cluster where the slots are now and subscribes the channels again on the
node that serves each; once that is confirmed their waiters look again, and the release on
the new primary wakes the one it hands the lock to. Until then each waiter looks again at the
end of its wait slice, as on one server (``core/attempts.py``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import select
import socket
import threading
import time
import uuid
from typing import Any

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import LockKeys, text_of
from django_redis_lock.backends.cluster import SHARDED_MARK, ClusterLockBackend
from django_redis_lock.backends.wire import NOTHING, replies_of
from django_redis_lock.runtime.shard import FIRST_BACKOFF_SECONDS, Shard, redirected
from django_redis_lock.runtime.tickets import Grant, Ticket, Unclaimed, parse_message

logger = logging.getLogger("django_redis_lock")

#: Channels kept subscribed after their last waiter left (the least lately used go first).
IDLE_CHANNELS = 256
# How long the thread goes on without a waiter before it hangs up and ends.
_IDLE_SECONDS = 30.0
# The longest one select() lasts: how often the thread looks at its connections' health.
_TICK_SECONDS = 1.0
# A quiet connection is PINGed after this long, and given up when the PONG takes as long.
_HEALTH_SECONDS = 5.0
# The longest pause before a node is connected again (doubling from FIRST_BACKOFF_SECONDS
# while it stays away), and between two questions to the cluster about where the slots are.
_MAX_BACKOFF_SECONDS = 0.5
# Replies read from one connection in a row before the others get their turn.
_MAX_READS = 1000


class ShardedListener:
    """This process's wake-ups on one cluster backend with sharded pub/sub (see the module):
    the same interface as ``Listener``, with a channel per lock."""

    def __init__(self, backend: ClusterLockBackend) -> None:
        self._backend = backend
        self._process = uuid.uuid4().hex
        self._mutex = threading.Lock()
        # secret -> (ticket, channel); channel -> how many of them wait on it.
        self._tickets: dict[str, tuple[Ticket, str]] = {}
        self._waiting: collections.Counter[str] = collections.Counter()
        # The channels to keep subscribed, the lately used last: those waited on, and idle ones.
        self._wanted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._unclaimed = Unclaimed()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # Rung (a byte written) when the wanted channels change: the thread's select wakes.
        self._bell, self._bell_out = socket.socketpair()
        self._bell.setblocking(False)
        self._bell_out.setblocking(False)
        # The thread's own: shards by node name, the node each wanted channel went to.
        self._shards: dict[str, Shard] = {}
        self._homes: dict[str, Shard] = {}
        self._outage = False
        self._asked_at = 0.0

    # -- the waiters' side ----------------------------------------------------------------------

    def channel_for(self, keys: LockKeys) -> str:
        """The channel a waiter of ``keys`` queues with: this process's for that lock, marked
        for the release to SPUBLISH to."""
        return SHARDED_MARK + self._backend.wake_channel(keys, self._process)

    def register(self, secret: str, ticket: Ticket, channel: str = "") -> None:
        """Route grants for ``secret``, which waits on ``channel`` (as :meth:`channel_for`
        made it), to ``ticket`` until :meth:`unregister`; subscribe the channel if needed."""
        channel = channel.removeprefix(SHARDED_MARK)
        with self._mutex:
            self._tickets[secret] = (ticket, channel)
            self._waiting[channel] += 1
            early = self._unclaimed.claim(secret)
            new = channel not in self._wanted
            self._wanted[channel] = None
            self._wanted.move_to_end(channel)
        if new:
            self._ring()
        if early is not None:
            ticket.wake(early)

    def unregister(self, secret: str) -> None:
        """Stop routing grants for ``secret``."""
        with self._mutex:
            self._forget(secret)

    def start(self) -> None:
        """Start the thread unless it runs already, or the listener was stopped for good."""
        with self._mutex:
            idle = self._thread is None or not self._thread.is_alive()
            if idle and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="django_redis_lock-shards", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it does within a tick) for good: the backend is dropped."""
        self._stop.set()
        self._ring()
        with self._mutex:
            running = self._thread is not None and self._thread.is_alive()
        if not running:
            self._close_bell()

    def _close_bell(self) -> None:
        for end in (self._bell, self._bell_out):
            with contextlib.suppress(OSError):
                end.close()

    def _forget(self, secret: str) -> tuple[Ticket, str] | None:
        """Drop ``secret``'s ticket (under the mutex); beyond IDLE_CHANNELS idle channels,
        the least lately used is let go."""
        found = self._tickets.pop(secret, None)
        if found is not None:
            channel = found[1]
            self._waiting[channel] -= 1
            if self._waiting[channel] <= 0:
                del self._waiting[channel]
                idle = len(self._wanted) - len(self._waiting)
                for old in list(self._wanted):
                    if idle <= IDLE_CHANNELS:
                        break
                    if old not in self._waiting:
                        del self._wanted[old]
                        idle -= 1
        return found

    def _ring(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError: rung already, plenty
            self._bell_out.send(b"x")

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        quiet_since = time.monotonic()
        try:
            while not self._stop.is_set():
                with self._mutex:
                    waiting = bool(self._tickets)
                now = time.monotonic()
                if waiting:
                    quiet_since = now
                elif now - quiet_since > _IDLE_SECONDS:
                    with self._mutex:  # idle channels go with the connections
                        if not self._tickets:
                            self._wanted.clear()
                            self._thread = None
                            return
                self._settle()
                self._read(self._pause())
        except Exception:  # a bug: the waiters look again at the end of their slices
            logger.exception("The sharded wake-up thread failed.")
            with self._mutex:
                self._thread = None
        finally:
            for shard in self._shards.values():
                shard.close()
            self._shards.clear()
            self._homes.clear()
            if self._stop.is_set():
                self._close_bell()

    def _settle(self) -> None:
        """Bring the subscriptions in line with the wanted channels: let go of unwanted ones,
        send new ones to the node of their slot, connect the shards that need it."""
        with self._mutex:
            wanted = set(self._wanted)
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
            connection = self._backend.node_connection(shard.node, _TICK_SECONDS)
            connection.connect()
            shard.connection = connection
            shard.replies = replies_of(connection, _TICK_SECONDS)
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
        for channel in channels:
            shard.channels.discard(channel)
            shard.confirmed.discard(channel)
            if self._homes.get(channel) is shard:
                del self._homes[channel]

    def _pause(self) -> float:
        """How long the next select may last: a tick, less while a channel has no home or a
        shard waits to connect."""
        with self._mutex:
            homeless = any(channel not in self._homes for channel in self._wanted)
        if homeless:
            return FIRST_BACKOFF_SECONDS
        pending = [s.retry_at for s in self._shards.values() if s.connection is None]
        if pending:
            return max(0.0, min(_TICK_SECONDS, min(pending) - time.monotonic()))
        return _TICK_SECONDS

    def _read(self, seconds: float) -> None:
        """Wait up to ``seconds`` for a reply on any connection (or the bell), and act on
        what came."""
        by_socket = {shard.sock: shard for shard in self._shards.values() if shard.sock}
        try:
            ready, _, _ = select.select([self._bell, *by_socket], [], [], seconds)
        except (OSError, ValueError):  # a socket closed meanwhile: look again
            ready = list(by_socket)
        for sock in ready:
            if sock is self._bell:
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
                if redirected(exc):
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
            self._dispatch(reply[2])
        elif kind == "ssubscribe" and len(reply) >= 2:
            channel = text_of(reply[1])
            shard.confirmed.add(channel)
            shard.backoff = FIRST_BACKOFF_SECONDS
            if self._outage:
                self._outage = False
                logger.info("Sharded wake-up channel is back.")
            with contextlib.suppress(*errors.CLIENT):
                self._backend.note_served(channel, shard.node)  # its waiters' calls go there
            self._wake_channel(channel)  # a grant sent before this was not heard
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

    def _dispatch(self, data: bytes | str) -> None:
        """``secret:token:acquired_at`` hands a lock over; ``secret:lease_ms`` nudges."""
        text = text_of(data)
        parsed = parse_message(text)
        if parsed is None:
            logger.warning("Ignored a malformed wake-up message: %r", text[:100])
            return
        secret, message = parsed
        with self._mutex:
            grant = isinstance(message, Grant)
            found = self._forget(secret) if grant else self._tickets.get(secret)
            if found is None:
                self._unclaimed.keep(secret, message)
        if found is not None:
            found[0].wake(message)

    def _wake_channel(self, channel: str) -> None:
        with self._mutex:
            tickets = [ticket for ticket, on in self._tickets.values() if on == channel]
        for ticket in tickets:
            ticket.wake(None)
