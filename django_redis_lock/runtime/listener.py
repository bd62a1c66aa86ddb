"""How waiters are woken: one pub/sub connection per process and server, whatever the waiters.

A waiter queues itself in Redis with its process's channel. The release that hands the lock
over PUBLISHes ``secret:token:acquired_at`` on that channel; the listener thread looks the
secret up among the process's tickets and wakes the thread (an Event) or the coroutine (a
future on its loop) that waits for it. Waiters therefore send nothing while they wait, and
the number of connections used for waiting stays at one per process.

Who reads that connection: the listener thread while a waiter needs it, but a waiting thread
reads it itself when nobody else does (a lock's lone waiter in its process, the usual case):
the grant then reaches the thread that waits for it without a hop through the listener thread.
The thread keeps the connection: it connects, subscribes, reconnects, and follows a Sentinel
failover; a waiter that meets a fault on the connection leaves it to the thread.

A grant published while the listener is reconnecting is not lost for good: once subscribed
again the listener wakes every waiter to look again, and each waiter also looks again at the
end of its wait slice (for the first waiter the holder's lease, at most
``core.attempts.MAX_WAIT_SLICE_MS``; for the others four fifths of
REDIS_LOCK["HANDOVER_LEASE"]); the attempt finds the lock already handed to its secret.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import LockKeys, text_of
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.backends.wire import NOTHING, Replies, replies_of
from django_redis_lock.runtime.tickets import (
    Grant,
    SyncTicket,
    Ticket,
    Unclaimed,
    parse_message,
    serve_reading,
)

logger = logging.getLogger("django_redis_lock")

# How long one blocking read on the pub/sub connection lasts before checking for a stop.
_READ_SECONDS = 1.0
# On a Sentinel backend: how often the listener asks the sentinels where the primary is, so
# that it (and the lock calls, see LockBackend.primary_address) follow a failover.
_PRIMARY_CHECK_SECONDS = 0.5
# A quiet connection is PINGed after this long, and given up when the PONG takes as long.
_HEALTH_SECONDS = 5.0
# Pauses between reconnects: doubling from the first while Redis stays away, and back to the
# first once subscribed again. Short, because the listener reconnects only while waiters wait
# (it ends when it finds none), and a waiter should hear of a new primary within a second.
_FIRST_BACKOFF_SECONDS = 0.1
_MAX_BACKOFF_SECONDS = 0.5
# Replies read without waiting when the thread takes the connection back, at most.
_MAX_CATCH_UP = 1000


class _PrimaryMoved(Exception):
    """The sentinels name another primary than the one the listener is subscribed on."""


class Listener:
    """The process's subscription to its grant channel on one backend.

    Its thread starts with the first waiter, and ends when its connection is lost while no
    waiter waits; on a Sentinel backend it follows the primary the sentinels name. Whoever
    holds ``_reading`` reads the connection: the thread, except while it is parked (no waiter
    needs it), when a waiting thread may take it (:meth:`serve`).
    """

    def __init__(self, backend: LockBackend) -> None:
        self._backend = backend
        self.channel = backend.channel(uuid.uuid4().hex)
        self._tickets: dict[str, Ticket] = {}
        # Messages that came before their waiter registered (it does after its queued attempt).
        self._unclaimed = Unclaimed()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = _FIRST_BACKOFF_SECONDS
        # True from a lost connection until subscribed again: one warning per outage.
        self._outage = False
        # One blocking read lasts this long at most; on Sentinel, reads end twice per check,
        # so a check is at most a quarter second late.
        self._read_seconds = _PRIMARY_CHECK_SECONDS / 2 if backend.sentinel else _READ_SECONDS
        # The right to read the connection. The thread holds it from its start to its end,
        # except while parked; the connection, set while subscribed, changes only under it.
        self._reading = threading.Lock()
        self._connection: Any = None
        self._replies: Replies | None = None
        self._heard = self._checked = 0.0
        self._pinged: float | None = None
        # The connection's SUBSCRIBE was confirmed: the thread parks only from then on, so that
        # the confirmation (which wakes every waiter to look again) is never a waiter's.
        self._subscribed = False
        # Set to wake the parked thread: a waiter needs it, a reader met a fault, or stop().
        self._wanted = threading.Event()
        # The thread waits for the connection back: a reading waiter leaves it after its read.
        self._claimed = False
        # What a reading waiter met on the connection, for the thread to act on.
        self._failure: BaseException | None = None

    def channel_for(self, keys: LockKeys) -> str:
        """The channel a waiter queues with: this process's, whatever the lock."""
        return self.channel

    def register(
        self, secret: str, ticket: Ticket, channel: str = "", *, read: bool = True
    ) -> None:
        """Route grants for ``secret`` to ``ticket`` until :meth:`unregister` (``channel``:
        this listener's own). A thread's ticket may read the connection itself (``read``);
        any other needs the thread."""
        with self._mutex:
            self._tickets[secret] = ticket
            early = self._unclaimed.claim(secret)
        if read and isinstance(ticket, SyncTicket):
            ticket.reader = self
        else:
            self._wanted.set()
        if early is not None:
            ticket.wake(early)

    def unregister(self, secret: str) -> None:
        """Stop routing grants for ``secret``."""
        with self._mutex:
            self._tickets.pop(secret, None)

    def start(self) -> None:
        """Start the listener thread unless it runs already."""
        with self._mutex:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="django_redis_lock-listener", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it does within one read."""
        self._stop.set()
        self._wanted.set()

    # -- a waiting thread reads ---------------------------------------------------------------

    def serve(self, ticket: SyncTicket, seconds: float) -> None:
        """Wait up to ``seconds`` for ``ticket``'s wake-up, reading the connection meanwhile
        whenever nobody else does; the wake-up is taken once given."""
        serve_reading(
            ticket, seconds, self._reading, lambda: self._claimed, self._read_until, self._leave
        )

    def _read_until(self, signal: threading.Lock, deadline: float) -> bool:
        """Read until the signal is given (by this thread's dispatch or another's wake-up),
        time is up, the listener thread claims the connection, or the connection fails;
        False when there is no connection to read (the thread connects, and reads once
        subscribed)."""
        connection = self._connection
        if connection is None or self._failure is not None:
            return False
        try:
            while signal.locked() and not self._claimed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # Where the primary is, the thread asks (when it takes the connection back,
                # at least once a read timeout): sentinels that do not answer hold up no waiter.
                self._step(connection, min(left, self._read_seconds), look_up=False)
        except Exception as exc:  # the thread reconnects, logs, follows the primary
            self._failure = exc
        return True

    def _leave(self, ticket: SyncTicket) -> None:
        """Give the connection back; wake the thread if other waiters remain (this one reads
        again when it waits again) or a fault needs it."""
        with self._mutex:
            self._reading.release()
            tickets = self._tickets  # a granted ticket is out of it already: mostly empty
            needed = self._failure is not None or (
                bool(tickets) and any(other is not ticket for other in tickets.values())
            )
        if needed:
            self._wanted.set()

    # -- the listener thread ------------------------------------------------------------------

    def _run(self) -> None:
        self._reading.acquire()
        try:
            self._connect_and_listen()
        finally:
            self._reading.release()

    def _connect_and_listen(self) -> None:
        while not self._stop.is_set():
            connection = None
            try:
                connection = self._connect()
                connection.connect()
                if self._backend.sentinel:
                    self._backend.note_primary((connection.host, int(connection.port)))
                connection.send_command("SUBSCRIBE", self.channel)
                self._listen(connection)
            except _PrimaryMoved as moved:
                logger.info("Lock wake-up channel follows the new Redis primary %s.", moved)
            except Exception as exc:  # Redis errors, and anything else: keep waiters served
                if self._stop.is_set() or self._retire():
                    break
                self._lost(exc)
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, _MAX_BACKOFF_SECONDS)
            finally:
                if connection is not None:
                    with contextlib.suppress(Exception):
                        connection.disconnect()

    def _retire(self) -> bool:
        """End the thread when no waiter needs it (``start()`` makes a new one on demand):
        an idle process does not reconnect, nor warn, while Redis is away."""
        with self._mutex:
            if self._tickets:
                return False
            self._thread = None
            self._outage = False
            return True

    def _lost(self, exc: Exception) -> None:
        """Log a lost connection: a warning once per outage, then debug lines."""
        if self._outage:
            logger.debug("Lock wake-up channel still away (%s); reconnecting.", exc)
        else:
            self._outage = True
            logger.warning("Lock wake-up channel lost (%s); reconnecting.", exc)

    def _connect(self) -> Any:
        """A connection of its own (the backend's, outside its pool), with a read timeout that
        lets the thread look up now and then. It is read directly: a blocked read wakes as
        soon as a grant arrives, quicker than the pub/sub helper's polling reads."""
        return self._backend.own_connection(read_timeout=self._read_seconds)

    def _listen(self, connection: Any) -> None:
        """Dispatch grants until stopped, parked while no waiter needs the thread; PING when
        quiet, so a dead connection shows; on a Sentinel backend, leave when the primary
        moved."""
        self._heard = self._checked = time.monotonic()
        self._pinged = None
        self._replies = replies_of(connection, self._read_seconds)
        self._connection = connection
        self._subscribed = False
        try:
            while not self._stop.is_set():
                if not self._park(connection):
                    self._step(connection, None)
        finally:
            self._connection = self._replies = None

    def _park(self, connection: Any) -> bool:
        """While no waiter is registered, leave the connection to the waiters that come (they
        read it themselves) until one needs the thread or it is time to look at the
        connection; then take it back and look: what came, PING, where the primary is.
        False, without parking, while waiters are registered (the thread reads for them) or
        the subscription is not confirmed yet."""
        with self._mutex:
            if self._tickets or not self._subscribed:
                return False
            self._reading.release()
        try:
            self._wanted.wait(self._read_seconds)
            self._wanted.clear()
        finally:
            self._claimed = True
            self._reading.acquire()
            self._claimed = False
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        for _ in range(_MAX_CATCH_UP):  # what came meanwhile, without waiting
            if not self._step(connection, 0):
                break
        return True

    def _step(self, connection: Any, seconds: float | None, *, look_up: bool = True) -> bool:
        """Read one reply and act on it; False if none came within ``seconds`` (None: the
        connection's read timeout), when a quiet connection is PINGed, or given up. On a
        Sentinel backend, first ask where the primary is when it is time (``look_up``)."""
        if (
            look_up
            and self._backend.sentinel
            and time.monotonic() - self._checked >= _PRIMARY_CHECK_SECONDS
        ):
            self._checked = time.monotonic()
            self._check_primary(connection)
        replies = self._replies
        assert replies is not None, "set with the connection"
        reply = replies.read(seconds)
        if reply is NOTHING:
            self._quiet(connection)
            return False
        self._heard, self._pinged = time.monotonic(), None
        kind = text_of(reply[0]) if isinstance(reply, list) and reply else ""
        if kind == "message":
            self._dispatch(reply[2])
        elif kind == "subscribe":
            self._subscribed = True
            self._backoff = _FIRST_BACKOFF_SECONDS
            if self._outage:
                self._outage = False
                logger.info("Lock wake-up channel is back.")
            self._wake_all()  # grants sent while we were away were not heard
        return True

    def _quiet(self, connection: Any) -> None:
        """Nothing came: PING a connection quiet for long, give it up if the PONG is late."""
        now = time.monotonic()
        if self._pinged is not None and now - self._pinged > _HEALTH_SECONDS:
            raise ConnectionError("no answer to PING on the wake-up channel")
        if self._pinged is None and now - self._heard > _HEALTH_SECONDS:
            connection.send_command("PING")
            self._pinged = now

    def _check_primary(self, connection: Any) -> None:
        """Raise _PrimaryMoved when the sentinels name another primary than the one the
        connection reaches (sentinels that do not answer change nothing)."""
        try:
            address = self._backend.primary_address()
        except errors.CLIENT as exc:
            logger.debug("Sentinel did not say where the Redis primary is: %s", exc)
            return
        if address is not None and address != (connection.host, int(connection.port)):
            raise _PrimaryMoved("{}:{}".format(*address))

    def _dispatch(self, data: bytes | str) -> None:
        """``secret:token:acquired_at`` hands a lock over; ``secret:lease_ms`` nudges."""
        text = text_of(data)
        parsed = parse_message(text)
        if parsed is None:
            logger.warning("Ignored a malformed message on %s: %r", self.channel, text[:100])
            return
        secret, message = parsed
        with self._mutex:
            if isinstance(message, Grant):
                ticket = self._tickets.pop(secret, None)
            else:
                ticket = self._tickets.get(secret)
            if ticket is None:
                self._unclaimed.keep(secret, message)
        if ticket is not None:
            ticket.wake(message)

    def _wake_all(self) -> None:
        with self._mutex:
            tickets = list(self._tickets.values())
        for ticket in tickets:
            ticket.wake(None)


class CompositeListener:
    """The listeners of several one-server backends, as one (a quorum's primaries): a
    waiter's ticket is woken by a release on any of them. The listeners are the runtime's own:
    it starts and stops them."""

    #: Not one channel: each backend puts in the one of each of its servers (see
    #: ``QuorumBackend.channel_of``); the attempts only ask whether there is one.
    channel = "*"

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self._listeners = tuple(listeners)

    def channel_for(self, keys: LockKeys) -> str:
        return self.channel

    def register(self, secret: str, ticket: Ticket, channel: str = "") -> None:
        for listener in self._listeners:
            listener.register(secret, ticket, read=False)

    def unregister(self, secret: str) -> None:
        for listener in self._listeners:
            listener.unregister(secret)

    def start(self) -> None:
        for listener in self._listeners:
            listener.start()

    def stop(self) -> None:
        """Its listeners are the runtime's own: it stops them."""
