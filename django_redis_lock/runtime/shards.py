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
import socket
import threading
import time
import uuid

from django_redis_lock.backends.base import LockKeys, text_of
from django_redis_lock.backends.cluster import SHARDED_MARK, ClusterLockBackend
from django_redis_lock.runtime.shard import TICK_SECONDS, Subscriptions
from django_redis_lock.runtime.tickets import (
    Grant,
    SyncTicket,
    Ticket,
    Unclaimed,
    parse_message,
    serve_reading,
)

logger = logging.getLogger("django_redis_lock")

#: Channels kept subscribed after their last waiter left (the least lately used go first).
IDLE_CHANNELS = 256
# How long the thread goes on without a waiter before it hangs up and ends.
_IDLE_SECONDS = 30.0


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
        # The connections, read by whoever holds ``_reading``: the thread, except while it is
        # parked, when a waiting thread may (``serve``).
        self._subscriptions = Subscriptions(backend, self._bell, self._dispatch, self._wake_channel)
        self._reading = threading.Lock()
        # Set to wake the parked thread; ``_claimed`` while it waits to read again.
        self._unpark = threading.Event()
        self._claimed = False

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
        if isinstance(ticket, SyncTicket):
            ticket.reader = self
        if new:
            self._ring()
        elif not isinstance(ticket, SyncTicket):
            self._unpark.set()  # a coroutine cannot read: the thread reads for it
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
        """Wake whoever reads (a new channel to subscribe, a stop): the bell for a read in
        progress, the event for the parked thread."""
        with contextlib.suppress(OSError):  # BlockingIOError: rung already, plenty
            self._bell_out.send(b"x")
        self._unpark.set()

    # -- a waiting thread reads ----------------------------------------------------------------

    def serve(self, ticket: SyncTicket, seconds: float) -> None:
        """Wait up to ``seconds`` for ``ticket``'s wake-up, reading the connections meanwhile
        while the thread is parked (nothing to do but read): the grant then reaches the thread
        that waits for it without a hop through the listener's thread."""
        serve_reading(
            ticket, seconds, self._reading, lambda: self._claimed, self._read_until, self._leave
        )

    def _read_until(self, signal: threading.Lock, deadline: float) -> bool:
        """Read until the signal is given, time is up, the thread claims the connections, or
        something changed (False then: the thread acts on it)."""
        subscriptions = self._subscriptions
        while signal.locked() and not self._claimed and not subscriptions.changed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            subscriptions.read(min(left, TICK_SECONDS))
        return not subscriptions.changed

    def _leave(self, ticket: SyncTicket) -> None:
        """Give the connections back; wake the thread if something changed or other waiters
        remain (this one reads again when it waits again)."""
        with self._mutex:
            self._reading.release()
            others = any(other is not ticket for other, _ in self._tickets.values())
        if others or self._subscriptions.changed:
            self._unpark.set()

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        self._reading.acquire()
        try:
            self._serve_waiters()
        except Exception:  # a bug: the waiters look again at the end of their slices
            logger.exception("The sharded wake-up thread failed.")
            with self._mutex:
                self._thread = None
        finally:
            self._subscriptions.close()
            self._reading.release()
            if self._stop.is_set():
                self._close_bell()

    def _serve_waiters(self) -> None:
        """Keep the subscriptions in line with the channels waited on and read them, until
        stopped or nobody waited for _IDLE_SECONDS; parked while only messages can come and
        no waiter is registered (one that comes reads for itself, :meth:`serve`)."""
        subscriptions = self._subscriptions
        quiet_since = settle_at = time.monotonic()
        wanted: set[str] = set()
        while not self._stop.is_set():
            now = time.monotonic()
            # Only grants came since the last look: straight on, so that the thread lets go of
            # the interpreter as soon as it woke their waiters.
            if subscriptions.changed or now >= settle_at:
                with self._mutex:
                    waiting, wanted = bool(self._tickets), set(self._wanted)
                if waiting:
                    quiet_since = now
                elif now - quiet_since > _IDLE_SECONDS and self._retire():
                    return
                subscriptions.settle(wanted)
                settle_at = time.monotonic() + subscriptions.pause(wanted)
            if not self._tickets and subscriptions.settled(wanted):
                self._park(settle_at)
            else:
                subscriptions.read(max(0.0, settle_at - time.monotonic()))

    def _park(self, until: float) -> None:
        """Leave the connections to the waiters that come until one needs the thread or it
        is time to look; then take them back and act on what came meanwhile."""
        self._reading.release()
        try:
            self._unpark.wait(max(0.0, until - time.monotonic()))
            self._unpark.clear()
        finally:
            self._claimed = True
            self._reading.acquire()
            self._claimed = False
        self._subscriptions.catch_up()

    def _retire(self) -> bool:
        """End the thread, idle channels and connections with it, unless a waiter came."""
        with self._mutex:
            if self._tickets:
                return False
            self._wanted.clear()
            self._thread = None
            return True

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
