"""How waiters are woken: one pub/sub connection per process and server, whatever the waiters.

A waiter queues itself in Redis with its process's channel. The release that hands the lock
over PUBLISHes ``secret:token:acquired_at`` on that channel; the listener thread looks the
secret up among the process's tickets and wakes the thread (an Event) or the coroutine (a
future on its loop) that waits for it. Waiters therefore send nothing while they wait, and
the number of connections used for waiting stays at one per process.

A grant published while the listener is reconnecting is not lost for good: once subscribed
again the listener wakes every waiter to look again, and each waiter also looks again at the
end of its wait slice (for the first waiter the holder's lease, at most
``core.attempts.MAX_WAIT_SLICE_MS``; for the others four fifths of
REDIS_LOCK["HANDOVER_LEASE"]); the attempt finds the lock already handed to its secret.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import text_of
from django_redis_lock.backends.single import LockBackend

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
# Messages kept for waiters that have not registered yet; the oldest go first.
_MAX_UNCLAIMED = 1000


def _read_options(connection: Any) -> dict[str, bool]:
    """What the listener passes to ``connection.read_response``.

    ``push_request=True``: on RESP3 a published message is a push reply, which the connection
    would otherwise hand to its push handler instead of returning it. redis-py 5.0's
    SentinelManagedConnection takes no such argument (it raises TypeError): it reads RESP2
    unless told otherwise, where messages are ordinary replies."""
    options = {"disconnect_on_error": False}
    try:
        parameters = inspect.signature(connection.read_response).parameters.values()
    except (TypeError, ValueError):  # no signature to read: the argument every version takes
        return options
    if any(p.name == "push_request" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        options["push_request"] = True
    return options


class Grant(NamedTuple):
    """A hand-over received from a release: the new hold's fencing token and start time."""

    token: int
    acquired_at: int


class Nudge(NamedTuple):
    """This waiter is first in line now; the lease it waits on ends in ``lease_ms``."""

    lease_ms: int


#: What wakes a waiter: its grant, a nudge, or None (time is up, or look again).
Message = Grant | Nudge | None


class _Inbox:
    """The latest message for one waiter; a grant is never replaced by a nudge."""

    def __init__(self) -> None:
        self._grant: Grant | None = None
        self._nudge: Nudge | None = None

    def put(self, message: Message) -> None:
        if isinstance(message, Grant):
            self._grant = message
        elif isinstance(message, Nudge):
            self._nudge = message

    def take(self) -> Message:
        if self._grant is not None:
            return self._grant
        nudge, self._nudge = self._nudge, None
        return nudge


class SyncTicket:
    """A thread's place among the listener's waiters."""

    def __init__(self) -> None:
        # A bare lock as the wake-up signal, held while nothing is pending: one futex wake on
        # the way to the waiter, where an Event (a Condition) adds a lock hand-off or two.
        self._signal = threading.Lock()
        self._signal.acquire()
        self._inbox = _Inbox()

    def wake(self, message: Message) -> None:
        """Called by the listener thread: a grant, a nudge, or None to look again."""
        self._inbox.put(message)
        with contextlib.suppress(RuntimeError):  # released already: a wake-up is pending
            self._signal.release()

    def wait(self, seconds: float) -> Message:
        """What woke the waiter within ``seconds``; None when nothing did, or to look again."""
        self._signal.acquire(timeout=seconds)
        return self._inbox.take()


class AsyncTicket:
    """A coroutine's place among the listener's waiters; woken on its own event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._inbox = _Inbox()

    def wake(self, message: Message) -> None:
        """Called by the listener thread; passes the wake-up to the waiter's loop."""
        # A closed loop raises RuntimeError: its waiter is gone, nobody needs the wake-up.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake, message)

    def _wake(self, message: Message) -> None:
        self._inbox.put(message)
        self._event.set()

    async def wait(self, seconds: float) -> Message:
        """:meth:`SyncTicket.wait` without blocking the event loop."""
        # asyncio.TimeoutError: the builtin TimeoutError only from Python 3.11 on.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)
        self._event.clear()
        return self._inbox.take()


Ticket = SyncTicket | AsyncTicket


class _PrimaryMoved(Exception):
    """The sentinels name another primary than the one the listener is subscribed on."""


class Listener:
    """The process's subscription to its grant channel on one backend.

    Its thread starts with the first waiter, and ends when its connection is lost while no
    waiter waits; on a Sentinel backend it follows the primary the sentinels name.
    """

    def __init__(self, backend: LockBackend) -> None:
        self._backend = backend
        self.channel = backend.channel(uuid.uuid4().hex)
        self._tickets: dict[str, Ticket] = {}
        # Messages that came before their waiter registered (it does after its queued attempt).
        self._unclaimed: collections.OrderedDict[str, Grant | Nudge] = collections.OrderedDict()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = _FIRST_BACKOFF_SECONDS
        # True from a lost connection until subscribed again: one warning per outage.
        self._outage = False

    def register(self, secret: str, ticket: Ticket) -> None:
        """Route grants for ``secret`` to ``ticket`` until :meth:`unregister`."""
        with self._mutex:
            self._tickets[secret] = ticket
            early = self._unclaimed.pop(secret, None)
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

    def _run(self) -> None:
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
        lets the thread look up now and then. The thread reads it directly: a blocked read
        wakes as soon as a grant arrives, quicker than the pub/sub helper's polling reads."""
        # On Sentinel, reads end twice per check, so a check is at most a quarter second late.
        read = _PRIMARY_CHECK_SECONDS / 2 if self._backend.sentinel else _READ_SECONDS
        return self._backend.own_connection(read_timeout=read)

    def _listen(self, connection: Any) -> None:
        """Dispatch grants until stopped; PING when quiet, so a dead connection shows; on a
        Sentinel backend, leave when the primary moved."""
        heard = checked = time.monotonic()
        pinged: float | None = None
        options = _read_options(connection)
        while not self._stop.is_set():
            if self._backend.sentinel and time.monotonic() - checked >= _PRIMARY_CHECK_SECONDS:
                checked = time.monotonic()
                self._check_primary(connection)
            try:
                reply = connection.read_response(**options)
            except errors.TIMEOUT:
                now = time.monotonic()
                if pinged is not None and now - pinged > _HEALTH_SECONDS:
                    raise ConnectionError("no answer to PING on the wake-up channel") from None
                if pinged is None and now - heard > _HEALTH_SECONDS:
                    connection.send_command("PING")
                    pinged = now
                continue
            heard, pinged = time.monotonic(), None
            kind = text_of(reply[0]) if isinstance(reply, list) and reply else ""
            if kind == "message":
                self._dispatch(reply[2])
            elif kind == "subscribe":
                self._backoff = _FIRST_BACKOFF_SECONDS
                if self._outage:
                    self._outage = False
                    logger.info("Lock wake-up channel is back.")
                self._wake_all()  # grants sent while we were away were not heard

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
        secret, *numbers = text.split(":")
        try:
            values = [int(number) for number in numbers]
            message: Grant | Nudge = Grant(*values) if len(values) == 2 else Nudge(*values)
        except (TypeError, ValueError):
            logger.warning("Ignored a malformed message on %s: %r", self.channel, text[:100])
            return
        with self._mutex:
            if isinstance(message, Grant):
                ticket = self._tickets.pop(secret, None)
            else:
                ticket = self._tickets.get(secret)
            if ticket is None and not isinstance(self._unclaimed.get(secret), Grant):
                self._unclaimed[secret] = message
                while len(self._unclaimed) > _MAX_UNCLAIMED:
                    self._unclaimed.popitem(last=False)
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

    def register(self, secret: str, ticket: Ticket) -> None:
        for listener in self._listeners:
            listener.register(secret, ticket)

    def unregister(self, secret: str) -> None:
        for listener in self._listeners:
            listener.unregister(secret)

    def start(self) -> None:
        for listener in self._listeners:
            listener.start()

    def stop(self) -> None:
        """Its listeners are the runtime's own: it stops them."""
