"""What a waiter waits on: a ticket the listener wakes with a grant, a nudge, or a "look
again" (see ``runtime.listener``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

from django_redis_lock.backends.base import LockKeys


class Grant(NamedTuple):
    """A hand-over received from a release: the new hold's fencing token and start time."""

    token: int
    acquired_at: int


class Nudge(NamedTuple):
    """This waiter is first in line now; the lease it waits on ends in ``lease_ms``."""

    lease_ms: int


#: What wakes a waiter: its grant, a nudge, or None (time is up, or look again).
Message = Grant | Nudge | None

# Messages kept for waiters that have not registered yet; the oldest go first.
_MAX_UNCLAIMED = 1000


def parse_message(text: str) -> tuple[str, Grant | Nudge] | None:
    """A published wake-up and the secret it is for: ``secret:token:acquired_at`` hands a
    lock over, ``secret:lease_ms`` nudges; None for anything else (someone else's text)."""
    secret, *numbers = text.split(":")
    try:
        if len(numbers) == 2:
            return secret, Grant(int(numbers[0]), int(numbers[1]))
        return secret, Nudge(*map(int, numbers))
    except (TypeError, ValueError):
        return None


class Unclaimed:
    """Messages that came before their waiter registered (it does after its queued
    attempt), the newest :data:`_MAX_UNCLAIMED` of them; a grant is never replaced by a
    nudge. Not thread-safe: its listener's mutex guards it."""

    def __init__(self) -> None:
        self._kept: collections.OrderedDict[str, Grant | Nudge] = collections.OrderedDict()

    def keep(self, secret: str, message: Grant | Nudge) -> None:
        if not isinstance(self._kept.get(secret), Grant):
            self._kept[secret] = message
            while len(self._kept) > _MAX_UNCLAIMED:
                self._kept.popitem(last=False)

    def claim(self, secret: str) -> Grant | Nudge | None:
        return self._kept.pop(secret, None)


class _Inbox:
    """The latest message for one waiter; a grant is never replaced by a nudge."""

    def __init__(self) -> None:
        self._grant: Grant | None = None
        self._nudge: Nudge | None = None

    def put(self, message: Message) -> None:
        if type(message) is Grant:
            self._grant = message
        elif type(message) is Nudge:
            self._nudge = message

    def take(self) -> Message:
        if self._grant is not None:
            return self._grant
        nudge, self._nudge = self._nudge, None
        return nudge


class Reader(Protocol):
    """A listener that lets a waiting thread read its connection (``Listener.serve``)."""

    def serve(self, ticket: SyncTicket, seconds: float) -> None: ...


class SyncTicket:
    """A thread's place among the listener's waiters."""

    def __init__(self) -> None:
        # A bare lock as the wake-up signal, held while nothing is pending: one futex wake on
        # the way to the waiter, where an Event (a Condition) adds a lock hand-off or two.
        self._signal = threading.Lock()
        self._signal.acquire()
        self._inbox = _Inbox()
        # The listener whose connection this waiter reads when nobody else does (not the
        # parts of a CompositeListener: a quorum's waiter listens on several connections).
        self.reader: Reader | None = None

    @property
    def signal(self) -> threading.Lock:
        """Held while no wake-up is pending: a reading waiter watches it (Listener.serve)."""
        return self._signal

    def wake(self, message: Message) -> None:
        """A grant, a nudge, or None to look again; from whichever thread read it."""
        self._inbox.put(message)
        # A bare try, where contextlib.suppress builds an object on the grant's way in.
        try:
            self._signal.release()
        except RuntimeError:  # released already: a wake-up is pending
            return

    def wait(self, seconds: float) -> Message:
        """What woke the waiter within ``seconds``; None when nothing did, or to look again."""
        if self.reader is not None:
            self.reader.serve(self, seconds)
        else:
            self._signal.acquire(timeout=seconds)
        return self._inbox.take()


class AsyncTicket:
    """A coroutine's place among the listener's waiters; woken on its own event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._inbox = _Inbox()
        self._pending = False  # a wake-up came that no wait has taken yet
        self._waiter: asyncio.Future[None] | None = None

    def wake(self, message: Message) -> None:
        """From the thread that read it; passes the wake-up to the waiter's loop."""
        # A closed loop raises RuntimeError: its waiter is gone, nobody needs the wake-up.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake, message)

    def _wake(self, message: Message) -> None:
        self._inbox.put(message)
        self._pending = True
        _settle(self._waiter)

    async def wait(self, seconds: float) -> Message:
        """:meth:`SyncTicket.wait` without blocking the event loop.

        A future and a timer, not ``asyncio.wait_for``, whose Python 3.10 and 3.11 versions
        can lose a cancellation that comes as the wait ends (the waiter would wait on)."""
        if not self._pending:
            waiter = self._waiter = self._loop.create_future()
            timer = self._loop.call_later(seconds, _settle, waiter)
            try:
                await waiter  # a cancellation comes out of here as it is
            finally:
                timer.cancel()
                self._waiter = None
        self._pending = False
        return self._inbox.take()


def _settle(waiter: asyncio.Future[None] | None) -> None:
    """End ``waiter``'s wait (a wake-up, or its time is up), unless it ended already."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


Ticket = SyncTicket | AsyncTicket


class WakeUps(Protocol):
    """What a waiter's flow uses of the listener of its backend: ``listener.Listener`` (one
    server), ``listener.CompositeListener`` (a quorum's servers) or ``shards.ShardedListener``
    (a cluster with sharded pub/sub)."""

    def channel_for(self, keys: LockKeys) -> str:
        """The channel a waiter of ``keys`` queues with, for the release to wake it on."""
        ...

    def register(self, secret: str, ticket: Ticket, channel: str = "") -> None:
        """Route grants for ``secret`` (queued with ``channel``) to ``ticket``."""
        ...

    def unregister(self, secret: str) -> None:
        """Stop routing grants for ``secret``."""
        ...

    def start(self) -> None:
        """Start reading, unless it does already."""
        ...

    def stop(self) -> None:
        """Stop for good: the backend is dropped."""
        ...


def serve_reading(
    ticket: SyncTicket,
    seconds: float,
    reading: threading.Lock,
    claimed: Callable[[], bool],
    read_until: Callable[[threading.Lock, float], bool],
    leave: Callable[[SyncTicket], None],
) -> None:
    """How a listener lets a waiting thread read for itself (its ``serve``): wait up to
    ``seconds`` for ``ticket``'s wake-up, and meanwhile, while the right to read (``reading``)
    is free and the listener's thread does not ask for it back (``claimed()``), read:
    ``read_until(signal, deadline)`` reads until the signal is given, time is up or it is
    claimed, and says False when the listener's thread must act first (it reads then, and
    wakes the waiter); ``leave(ticket)`` gives the right back. The wake-up is taken once
    given."""
    deadline = time.monotonic() + seconds
    signal = ticket.signal
    while not signal.acquire(blocking=False):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if claimed() or not reading.acquire(blocking=False):
            signal.acquire(timeout=left)  # whoever reads wakes this waiter
            return
        try:
            read = read_until(signal, deadline)
        finally:
            leave(ticket)
        if not read:
            signal.acquire(timeout=max(0.0, deadline - time.monotonic()))
            return
