"""How waiters are woken: one pub/sub connection per process and backend, whatever the waiters.

A waiter queues itself in Redis with its process's channel. The release that hands the lock
over PUBLISHes ``secret:token:acquired_at`` on that channel; the listener thread looks the
secret up among the process's tickets and wakes the thread (an Event) or the coroutine (a
future on its loop) that waits for it. Waiters therefore send nothing while they wait, and
the number of connections used for waiting stays at one per process.

A grant published while the listener is reconnecting is not lost for good: once subscribed
again the listener wakes every waiter to look again, and each waiter also looks again at the
end of its wait slice (the holder's lease, at most ``MAX_WAIT_SLICE``); the attempt finds the
lock already handed to its secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from typing import Any, NamedTuple

import redis
import redis.client
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_redis_lock.backends import LockBackend

logger = logging.getLogger("django_redis_lock")

# How long one blocking read on the pub/sub connection lasts before checking for a stop.
_READ_SECONDS = 1.0
# A quiet connection is PINGed after this long, and given up when the PONG takes as long.
_HEALTH_SECONDS = 5.0
_MAX_BACKOFF_SECONDS = 5.0
#: The longest a waiter waits for a grant before it looks again (milliseconds).
MAX_WAIT_SLICE_MS = 10_000


class Grant(NamedTuple):
    """A hand-over received from a release: the new hold's fencing token and start time."""

    token: int
    acquired_at: int


class SyncTicket:
    """A thread's place among the listener's waiters."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._grant: Grant | None = None

    def wake(self, grant: Grant | None) -> None:
        """Called by the listener thread: with the grant, or None to make the waiter look again."""
        if grant is not None:
            self._grant = grant
        self._event.set()

    def wait(self, seconds: float) -> Grant | None:
        """The grant, if it arrives within ``seconds`` (None also when woken to look again)."""
        self._event.wait(seconds)
        self._event.clear()
        return self._grant


class AsyncTicket:
    """A coroutine's place among the listener's waiters; woken on its own event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._grant: Grant | None = None

    def wake(self, grant: Grant | None) -> None:
        """Called by the listener thread; passes the wake-up to the waiter's loop."""
        # A closed loop raises RuntimeError: its waiter is gone, nobody needs the wake-up.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake, grant)

    def _wake(self, grant: Grant | None) -> None:
        if grant is not None:
            self._grant = grant
        self._event.set()

    async def wait(self, seconds: float) -> Grant | None:
        """:meth:`SyncTicket.wait` without blocking the event loop."""
        # asyncio.TimeoutError: the builtin TimeoutError only from Python 3.11 on.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)
        self._event.clear()
        return self._grant


Ticket = SyncTicket | AsyncTicket


class Listener:
    """The process's subscription to its grant channel on one backend."""

    def __init__(self, backend: LockBackend) -> None:
        self._client = backend.client
        self.channel = backend.channel(uuid.uuid4().hex)
        self.ready = threading.Event()
        self._tickets: dict[str, Ticket] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, secret: str, ticket: Ticket) -> None:
        """Route grants for ``secret`` to ``ticket`` until :meth:`unregister`."""
        with self._mutex:
            self._tickets[secret] = ticket

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

    def wait_ready(self, seconds: float) -> bool:
        """Whether the subscription is in effect within ``seconds``."""
        return self.ready.wait(seconds)

    def stop(self) -> None:
        """Ask the thread to end; it does within one read."""
        self._stop.set()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self.channel)
                self._listen(pubsub)
            except Exception as exc:  # Redis errors, and anything else: keep waiters served
                self.ready.clear()
                if self._stop.is_set():
                    break
                logger.warning("Lock wake-up channel lost (%s); reconnecting.", exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
            else:
                backoff = 0.1
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()
        self.ready.clear()

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        """Dispatch grants until stopped; PING when quiet, so a dead connection shows."""
        heard = time.monotonic()
        pinged: float | None = None
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=_READ_SECONDS)
            now = time.monotonic()
            if message is None:
                if pinged is not None and now - pinged > _HEALTH_SECONDS:
                    raise redis.ConnectionError("no answer to PING on the wake-up channel")
                if pinged is None and now - heard > _HEALTH_SECONDS:
                    pubsub.ping()
                    pinged = now
                continue
            heard, pinged = now, None
            if message["type"] == "subscribe":
                self.ready.set()
                self._wake_all()  # grants sent while we were away were not heard
            elif message["type"] == "message":
                self._dispatch(message["data"])

    def _dispatch(self, data: bytes | str) -> None:
        """``secret:token:acquired_at`` hands a lock over; a bare ``secret`` says look again."""
        text = data.decode() if isinstance(data, bytes) else data
        secret, _, rest = text.partition(":")
        grant: Grant | None = None
        if rest:
            try:
                token, acquired_at = rest.split(":")
                grant = Grant(int(token), int(acquired_at))
            except ValueError:
                logger.warning("Ignored a malformed message on %s: %r", self.channel, text[:100])
                return
        with self._mutex:
            ticket = self._tickets.pop(secret, None) if grant else self._tickets.get(secret)
        if ticket is not None:
            ticket.wake(grant)

    def _wake_all(self) -> None:
        with self._mutex:
            tickets = list(self._tickets.values())
        for ticket in tickets:
            ticket.wake(None)


_listeners: dict[LockBackend, Listener] = {}
_listeners_mutex = threading.Lock()


def listener_for(backend: LockBackend) -> Listener:
    """This process's listener on ``backend`` (its thread starts on first :meth:`start`)."""
    listener = _listeners.get(backend)
    if listener is None:
        with _listeners_mutex:
            listener = _listeners.get(backend)
            if listener is None:
                listener = _listeners[backend] = Listener(backend)
    return listener


def _stop_all() -> None:
    with _listeners_mutex:
        for listener in _listeners.values():
            listener.stop()
        _listeners.clear()


@receiver(setting_changed)
def _forget_listeners(*, setting: str, **kwargs: Any) -> None:
    if setting in ("CACHES", "REDIS_LOCK"):
        _stop_all()


def _after_fork_in_child() -> None:
    # The parent's listener threads do not exist here and its sockets are not ours to use.
    global _listeners, _listeners_mutex
    _listeners = {}
    _listeners_mutex = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
