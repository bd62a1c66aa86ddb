"""The Lock: acquire, release and extend one named lock, from sync or async code.

Ownership belongs to the Lock object: each acquisition gets a random secret, and only the
object that holds it can release or extend that hold. Create one Lock per critical section
(``with lock("name"):``); a Lock object is not meant to be shared by concurrent threads or
tasks.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any, NamedTuple

import redis
from django.dispatch import Signal

from django_redis_lock import signals, waiting
from django_redis_lock.backends import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockBusy, LockError, LockNotOwned, LockUnavailable
from django_redis_lock.watchdog import Hold, watchdog

logger = logging.getLogger("django_redis_lock")

#: The longest lock name accepted, in characters.
MAX_NAME_LENGTH = 1024

# How long a queued waiter's place outlives the slice it waits for, to cover its wake-up.
_QUEUE_GRACE_MS = 2000

_HOST = socket.gethostname()


def validate_name(name: object) -> str:
    """``name`` if it is a usable lock name, else a TypeError or ValueError saying why."""
    if not isinstance(name, str):
        raise TypeError(f"A lock name must be a str, not {type(name).__name__}.")
    if not name:
        raise ValueError("A lock name must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"A lock name is at most {MAX_NAME_LENGTH} characters; this one has {len(name)}."
        )
    return name


def seconds_to_ms(value: object, what: str) -> int:
    """A positive, finite number of seconds as whole milliseconds (at least 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}.")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, not {value!r}.")
    return max(1, round(value * 1000))


def tombstone_ms() -> int:
    """How long a released lock keeps its last fencing token, in ms (from the settings)."""
    return seconds_to_ms(lock_settings.TOMBSTONE_TIMEOUT, "REDIS_LOCK['TOMBSTONE_TIMEOUT']")


def _blocking_timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"blocking_timeout must be a number of seconds or None, not {type(value).__name__}."
        )
    if math.isnan(value) or value < 0:
        raise ValueError(f"blocking_timeout must be zero or more seconds, not {value!r}.")
    if math.isinf(value):
        raise ValueError("blocking_timeout=inf: pass None to wait without limit.")
    return float(value)


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, not {value!r}.")
    return value


def _thread_owner() -> str:
    return f"{_HOST} pid {os.getpid()} thread {threading.current_thread().name}"


def _task_owner() -> str:
    task = asyncio.current_task()
    where = f"task {task.get_name()}" if task is not None else "event loop"
    return f"{_HOST} pid {os.getpid()} {where}"


class _Attempt(NamedTuple):
    """Run the acquire script; ``wait_ms`` 0: do not queue, else queue for that long."""

    wait_ms: int


class _AwaitListener(NamedTuple):
    """Wait (bounded) until this process listens for grants, so that it can queue."""

    seconds: float


class _AwaitGrant(NamedTuple):
    """Wait (bounded) for the hand-over; ``None`` comes back if it does not arrive."""

    seconds: float


_Step = _Attempt | _AwaitListener | _AwaitGrant
# What an acquire ends with: the fencing token and start time of the hold, or None.
_Acquired = tuple[int, int] | None


class Lock:
    """A named distributed lock; build it with :func:`django_redis_lock.lock`."""

    def __init__(
        self,
        backend: LockBackend,
        name: str,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool | None = None,
        reentrant: bool = False,
        label: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        self._timeout_ms = seconds_to_ms(
            lock_settings.TIMEOUT if timeout is None else timeout,
            "timeout" if timeout is not None else "REDIS_LOCK['TIMEOUT']",
        )
        self._blocking = _flag(blocking, "blocking")
        self._blocking_timeout = _blocking_timeout(blocking_timeout)
        self._auto_renew = (
            _flag(lock_settings.AUTO_RENEW, "REDIS_LOCK['AUTO_RENEW']")
            if auto_renew is None
            else _flag(auto_renew, "auto_renew")
        )
        self._reentrant = _flag(reentrant, "reentrant")
        if label is not None and not isinstance(label, str):
            raise TypeError(f"label must be a str or None, not {type(label).__name__}.")
        self.label = label
        self._backend = backend
        self._keys = backend.keys(self.name)
        self._secret: str | None = None
        self._depth = 0
        self._hold: Hold | None = None
        #: The fencing token of this object's current hold; None when it holds nothing.
        self.fencing_token: int | None = None
        #: True once the watchdog, extend() or release() found the hold taken away.
        self.lost = False

    def __repr__(self) -> str:
        state = "held" if self._secret is not None else "not held"
        return f"<Lock {self.name!r} {state}>"

    @property
    def timeout(self) -> float:
        """The lease in seconds: how long the lock lives unless renewed."""
        return self._timeout_ms / 1000

    # -- acquire ---------------------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take the lock; wait for it unless ``blocking`` is False; True when taken."""
        if self._holding():
            return self._reenter()
        secret, owner = secrets.token_hex(16), _thread_owner()
        listener = waiting.listener_for(self._backend)
        plan = self._plan(blocking, blocking_timeout, listener)
        ticket: waiting.SyncTicket | None = None
        result: Any = None
        try:
            while True:
                step = plan.send(result)
                if isinstance(step, _Attempt):
                    if step.wait_ms and ticket is None:
                        ticket = waiting.SyncTicket()
                        listener.register(secret, ticket)
                    args = self._acquire_args(secret, owner, step.wait_ms, listener.channel)
                    result = self._call(self._backend.scripts.acquire, self._keys.as_list(), args)
                elif isinstance(step, _AwaitListener):
                    listener.start()
                    result = listener.wait_ready(step.seconds)
                else:
                    assert ticket is not None
                    result = ticket.wait(step.seconds)
        except StopIteration as done:
            return self._took(secret, done.value)
        finally:
            if ticket is not None:
                listener.unregister(secret)

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code: waiting never blocks the event loop."""
        if self._holding():
            return self._reenter()
        secret, owner = secrets.token_hex(16), _task_owner()
        listener = waiting.listener_for(self._backend)
        plan = self._plan(blocking, blocking_timeout, listener)
        _, scripts = self._backend.async_client()
        ticket: waiting.AsyncTicket | None = None
        result: Any = None
        try:
            while True:
                step = plan.send(result)
                if isinstance(step, _Attempt):
                    if step.wait_ms and ticket is None:
                        ticket = waiting.AsyncTicket()
                        listener.register(secret, ticket)
                    args = self._acquire_args(secret, owner, step.wait_ms, listener.channel)
                    result = await self._acall(scripts.acquire, self._keys.as_list(), args)
                elif isinstance(step, _AwaitListener):
                    listener.start()
                    loop = asyncio.get_running_loop()
                    result = await loop.run_in_executor(None, listener.wait_ready, step.seconds)
                else:
                    assert ticket is not None
                    result = await ticket.wait(step.seconds)
        except StopIteration as done:
            return self._took(secret, done.value)
        finally:
            if ticket is not None:
                listener.unregister(secret)

    def _plan(
        self, blocking: bool | None, blocking_timeout: float | None, listener: waiting.Listener
    ) -> Generator[_Step, Any, _Acquired]:
        """The steps of one acquire, shared by the sync and async drivers.

        Waiters queue in Redis and are woken by the release that hands them the lock; when no
        grant comes they try again when the holder's lease ends, so a crashed holder delays
        them by no more than its lease. The last attempt at the deadline also leaves the queue.
        """
        wait = self._blocking if blocking is None else _flag(blocking, "blocking")
        limit = self._blocking_timeout if blocking_timeout is None else None
        if blocking_timeout is not None:
            limit = _blocking_timeout(blocking_timeout)
        deadline = None if limit is None else time.monotonic() + limit
        busy_signalled = False
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            queue = wait and (left is None or left > 0) and listener.ready.is_set()
            wait_ms = 0
            if queue:
                wait_ms = waiting.MAX_WAIT_SLICE_MS
                if left is not None:
                    wait_ms = min(wait_ms, math.ceil(left * 1000))
            result = yield _Attempt(wait_ms)
            if result[0] == 1:
                return int(result[1]), int(result[2])
            if not busy_signalled:
                busy_signalled = True
                self._send(signals.lock_busy, None)
            if not wait or (wait_ms == 0 and left is not None and left <= 0):
                return None
            pause = self._pause(int(result[1]), left)  # woken sooner by a grant
            if wait_ms == 0:
                yield _AwaitListener(pause)
                continue
            grant = yield _AwaitGrant(pause)
            if grant is not None:
                return grant.token, grant.acquired_at

    def _pause(self, lease_ms: int, left: float | None) -> float:
        """How long to wait before looking again: until the holder's lease ends, at most the
        wait slice and what is left of ``blocking_timeout``."""
        lease_ms = lease_ms if lease_ms >= 0 else self._timeout_ms
        seconds = min(lease_ms, waiting.MAX_WAIT_SLICE_MS) / 1000 + 0.001
        return seconds if left is None else max(0.0, min(seconds, left))

    def _acquire_args(self, secret: str, owner: str, wait_ms: int, channel: str) -> list[Any]:
        return [
            secret,
            self._timeout_ms,
            owner,
            self.label or "",
            wait_ms,
            channel,
            _QUEUE_GRACE_MS,
        ]

    def _holding(self) -> bool:
        return self._secret is not None and not self.lost

    def _reenter(self) -> bool:
        if not self._reentrant:
            raise LockError(
                f"This Lock object already holds {self.name!r}; pass reentrant=True to "
                "acquire it again, or create a new Lock for another critical section."
            )
        self._depth += 1
        return True

    def _took(self, secret: str, acquired: _Acquired) -> bool:
        if acquired is None:
            return False
        self._secret, self._depth = secret, 1
        self.fencing_token, self.lost = acquired[0], False
        if self._auto_renew:
            self._hold = Hold(self, self._backend, self._keys, secret, self._timeout_ms)
            watchdog().add(self._hold)
        logger.debug("Acquired lock %r (fencing token %s).", self.name, self.fencing_token)
        self._send(signals.lock_acquired, self.fencing_token)
        return True

    # -- release ---------------------------------------------------------------------------

    def release(self) -> None:
        """Release the lock; LockNotOwned if this object does not hold it."""
        secret = self._release_begin()
        if secret is None:
            return
        args = [secret, tombstone_ms()]
        self._release_end(self._call(self._backend.scripts.release, self._keys.as_list(), args))

    async def arelease(self) -> None:
        """:meth:`release` for async code."""
        secret = self._release_begin()
        if secret is None:
            return
        _, scripts = self._backend.async_client()
        args = [secret, tombstone_ms()]
        self._release_end(await self._acall(scripts.release, self._keys.as_list(), args))

    def _release_begin(self) -> str | None:
        """The secret to release with, or None when an inner reentrant hold just ended."""
        secret = self._owned_secret()
        if self._depth > 1:
            self._depth -= 1
            return None
        self._stop_renewing()
        if self.lost:
            self._forget()
            raise LockNotOwned(f"The lock {self.name!r} was lost before this release.")
        return secret

    def _release_end(self, released: int) -> None:
        token = self.fencing_token
        self._forget()
        if not released:
            self._notify_lost(token)
            raise LockNotOwned(
                f"The lock {self.name!r} was no longer held by this Lock object "
                "(it expired or was force-released) when it was released."
            )
        logger.debug("Released lock %r.", self.name)
        self._send(signals.lock_released, token)

    # -- extend ----------------------------------------------------------------------------

    def extend(self, additional_time: float | None = None, *, replace_ttl: bool = False) -> None:
        """Lengthen the lease by ``additional_time`` seconds (None: the lock's timeout).

        With ``replace_ttl=True`` the lease becomes exactly ``additional_time`` from now.
        """
        args = self._extend_args(additional_time, replace_ttl)
        self._extend_end(self._call(self._backend.scripts.extend, [self._keys.lock], args))

    async def aextend(
        self, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """:meth:`extend` for async code."""
        args = self._extend_args(additional_time, replace_ttl)
        _, scripts = self._backend.async_client()
        self._extend_end(await self._acall(scripts.extend, [self._keys.lock], args))

    def _extend_args(self, additional_time: float | None, replace_ttl: bool) -> list[Any]:
        ms = (
            self._timeout_ms
            if additional_time is None
            else seconds_to_ms(additional_time, "additional_time")
        )
        mode = "replace" if _flag(replace_ttl, "replace_ttl") else "add"
        secret = self._owned_secret()
        if self.lost:
            raise LockNotOwned(f"The lock {self.name!r} was lost; it cannot be extended.")
        return [secret, ms, mode]

    def _extend_end(self, left: int) -> None:
        if not left:
            notify = self._mark_lost()
            notify()
            raise LockNotOwned(f"The lock {self.name!r} is no longer held by this Lock object.")

    # -- state -----------------------------------------------------------------------------

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return bool(self._call(self._backend.client.hexists, self._keys.lock, "s"))

    async def alocked(self) -> bool:
        """:meth:`locked` for async code."""
        client, _ = self._backend.async_client()
        return bool(await self._acall(client.hexists, self._keys.lock, "s"))

    def owned(self) -> bool:
        """Whether this object holds the lock (asks Redis: an expired hold is not owned)."""
        if not self._holding():
            return False
        return self._owned_end(self._call(self._backend.client.hget, self._keys.lock, "s"))

    async def aowned(self) -> bool:
        """:meth:`owned` for async code."""
        if not self._holding():
            return False
        client, _ = self._backend.async_client()
        return self._owned_end(await self._acall(client.hget, self._keys.lock, "s"))

    def _owned_end(self, holder: bytes | str | None) -> bool:
        if isinstance(holder, bytes):
            holder = holder.decode()
        if holder == self._secret:
            return True
        self._mark_lost()()
        return False

    def ttl(self) -> float | None:
        """Seconds left of the lease, or None when nobody holds the lock."""
        pipe = self._backend.client.pipeline(transaction=False)
        pipe.hexists(self._keys.lock, "s")
        pipe.pttl(self._keys.lock)
        return self._ttl_end(self._call(pipe.execute))

    async def attl(self) -> float | None:
        """:meth:`ttl` for async code."""
        client, _ = self._backend.async_client()
        pipe = client.pipeline(transaction=False)
        pipe.hexists(self._keys.lock, "s")
        pipe.pttl(self._keys.lock)
        return self._ttl_end(await self._acall(pipe.execute))

    @staticmethod
    def _ttl_end(replies: list[Any]) -> float | None:
        held, left = replies
        return left / 1000 if held and left >= 0 else None

    def _owned_secret(self) -> str:
        if self._secret is None:
            raise LockNotOwned(f"This Lock object does not hold {self.name!r}.")
        return self._secret

    def _stop_renewing(self) -> None:
        if self._hold is not None:
            watchdog().remove(self._hold)
            self._hold = None

    def _forget(self) -> None:
        self._stop_renewing()
        self._secret, self._depth, self.fencing_token = None, 0, None

    def _mark_lost(self) -> Callable[[], None]:
        """Record that the hold was taken away; returns the notification to send unlocked."""
        self.lost = True
        self._stop_renewing()
        token = self.fencing_token
        return lambda: self._notify_lost(token)

    def _notify_lost(self, token: int | None) -> None:
        self.lost = True
        logger.warning(
            "Lock %r (fencing token %s) was lost: it expired or was force-released.",
            self.name,
            token,
        )
        self._send(signals.lock_lost, token)

    def _send(self, signal: Signal, token: int | None) -> None:
        signal.send(sender=Lock, lock=self, name=self.name, fencing_token=token)

    # -- Redis calls -------------------------------------------------------------------------

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis failed for lock {self.name!r}: {exc}") from exc

    async def _acall(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return await method(*args)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis failed for lock {self.name!r}: {exc}") from exc

    # -- context managers ----------------------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockBusy(f"The lock {self.name!r} is held by someone else.")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockNotOwned:
            if exc_type is None:
                raise

    async def __aenter__(self) -> Lock:
        if not await self.aacquire():
            raise LockBusy(f"The lock {self.name!r} is held by someone else.")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.arelease()
        except LockNotOwned:
            if exc_type is None:
                raise
