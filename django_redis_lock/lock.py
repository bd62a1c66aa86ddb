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
from django_redis_lock.runtime import runtime
from django_redis_lock.scripts import HANDOVER_LEASE_MS
from django_redis_lock.validation import (
    MAX_OWNER_LENGTH,
    refuse_contradiction,
    seconds_to_ms,
    shorten,
    validate_blocking_timeout,
    validate_flag,
    validate_label,
    validate_name,
)
from django_redis_lock.watchdog import Hold, Leave

logger = logging.getLogger("django_redis_lock")

# How long a queued waiter's place outlives the slice it waits for, to cover its wake-up.
_QUEUE_GRACE_MS = 2000


def _thread_owner() -> str:
    where = f"thread {threading.current_thread().name}"
    return shorten(f"{runtime().process} {where}", MAX_OWNER_LENGTH)


def _task_owner() -> str:
    task = asyncio.current_task()
    where = f"task {task.get_name()}" if task is not None else "event loop"
    return shorten(f"{runtime().process} {where}", MAX_OWNER_LENGTH)


def _new_secret() -> str:
    """128 random bits from the OS, as hex: the secret of one acquisition."""
    return os.urandom(16).hex()  # what secrets.token_hex(16) does, minus two calls


class _Attempt(NamedTuple):
    """Run the acquire script; ``wait_ms`` 0: do not queue, else queue for that long."""

    wait_ms: int


class _AwaitGrant(NamedTuple):
    """Wait (bounded) for the hand-over; ``None`` comes back if it does not arrive."""

    seconds: float


_Step = _Attempt | _AwaitGrant


class _Acquired(NamedTuple):
    """A hold just taken: its fencing token, and whether a release handed it over (then its
    lease is the short hand-over lease until this process lengthens it)."""

    token: int
    handed_over: bool


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
        self._blocking = validate_flag(blocking, "blocking")
        self._blocking_timeout = validate_blocking_timeout(blocking_timeout)
        refuse_contradiction(self._blocking, self._blocking_timeout)
        self._auto_renew = (
            validate_flag(lock_settings.AUTO_RENEW, "REDIS_LOCK['AUTO_RENEW']")
            if auto_renew is None
            else validate_flag(auto_renew, "auto_renew")
        )
        self._reentrant = validate_flag(reentrant, "reentrant")
        self.label = validate_label(label)
        self._backend = backend
        self._keys = backend.keys_for(self.name)
        self._secret: str | None = None
        self._depth = 0
        self._hold: Hold | None = None
        #: The fencing token of this object's current hold; None when it holds nothing.
        self.fencing_token: int | None = None
        #: True once the watchdog, extend() or release() found the hold taken away.
        self.lost = False
        #: Seconds left of the holder's lease when this object last found the lock busy.
        self.busy_ttl: float | None = None

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
        wait, limit = self._wait_options(blocking, blocking_timeout)
        if wait and limit != 0 and asyncio._get_running_loop() is not None:
            raise RuntimeError(
                f"Lock.acquire() of {self.name!r} would block the running event loop while it "
                "waits: use `await lock.aacquire()` (or `async with`), or acquire(blocking=False)."
            )
        if self._holding():
            args = self._confirm_args()
            if self._confirmed(self._call(self._backend.scripts.extend, [self._keys.lock], args)):
                return self._reenter()
        secret, owner = _new_secret(), _thread_owner()
        listener = runtime().listener(self._backend)
        plan = self._plan(wait, limit)
        ticket: waiting.SyncTicket | None = None
        result: Any = None
        sent = False  # an attempt went out: Redis may have granted or queued this secret
        try:
            while True:
                step = plan.send(result)
                if isinstance(step, _Attempt):
                    args = self._acquire_args(secret, owner, step.wait_ms, listener.channel)
                    sent = True
                    result = self._call(self._backend.scripts.acquire, self._keys.all, args)
                    if step.wait_ms and ticket is None and isinstance(result, list):  # queued
                        ticket = waiting.SyncTicket()
                        listener.register(secret, ticket)
                else:
                    assert ticket is not None
                    listener.start()
                    result = ticket.wait(step.seconds)
        except StopIteration as done:
            return self._took(secret, done.value)
        except BaseException as exc:
            if sent:  # leave the queue, or give back a grant this call will not return
                self._leave(secret, now=not isinstance(exc, LockUnavailable))
            raise
        finally:
            if ticket is not None:
                listener.unregister(secret)

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code: waiting never blocks the event loop."""
        wait, limit = self._wait_options(blocking, blocking_timeout)
        _, scripts = self._backend.async_client()
        if self._holding():
            args = self._confirm_args()
            if self._confirmed(await self._acall(scripts.extend, [self._keys.lock], args)):
                return self._reenter()
        secret, owner = _new_secret(), _task_owner()
        listener = runtime().listener(self._backend)
        plan = self._plan(wait, limit)
        ticket: waiting.AsyncTicket | None = None
        result: Any = None
        sent = False
        try:
            while True:
                step = plan.send(result)
                if isinstance(step, _Attempt):
                    args = self._acquire_args(secret, owner, step.wait_ms, listener.channel)
                    sent = True
                    result = await self._acall(scripts.acquire, self._keys.all, args)
                    if step.wait_ms and ticket is None and isinstance(result, list):  # queued
                        ticket = waiting.AsyncTicket()
                        listener.register(secret, ticket)
                else:
                    assert ticket is not None
                    listener.start()
                    result = await ticket.wait(step.seconds)
        except StopIteration as done:
            return self._took(secret, done.value)
        except BaseException as exc:
            if sent:  # cancelled, or Redis failed: a grant must not outlive this call
                leave = self._aleave(secret, now=not isinstance(exc, LockUnavailable))
                await asyncio.shield(leave)
            raise
        finally:
            if ticket is not None:
                listener.unregister(secret)

    def _wait_options(
        self, blocking: bool | None, blocking_timeout: float | None
    ) -> tuple[bool, float | None]:
        """Whether to wait, and for how long at most, from acquire()'s arguments and lock()'s."""
        if blocking is None and blocking_timeout is None:
            return self._blocking, self._blocking_timeout
        wait = self._blocking if blocking is None else validate_flag(blocking, "blocking")
        if blocking_timeout is None:
            return wait, self._blocking_timeout
        limit = validate_blocking_timeout(blocking_timeout)
        refuse_contradiction(wait, limit)
        return wait, limit

    def _plan(self, wait: bool, limit: float | None) -> Generator[_Step, Any, _Acquired | None]:
        """The steps of one acquire, shared by the sync and async drivers.

        A waiter queues in Redis with its first attempt and is woken by the release that hands
        it the lock. Without a grant it tries again after the wait the script gave it: the
        first waiter when the holder's lease ends (the holder may have died), the others after
        a longer slice. The last attempt, at the deadline, also leaves the queue.
        """
        deadline = None if limit is None else time.monotonic() + limit
        busy_signalled = False
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            wait_ms = 0
            if wait and (left is None or left > 0):
                wait_ms = waiting.MAX_WAIT_SLICE_MS
                if left is not None:
                    wait_ms = min(wait_ms, math.ceil(left * 1000))
            result = yield _Attempt(wait_ms)
            if not isinstance(result, list):  # the fencing token: acquired
                return _Acquired(int(result), handed_over=False)
            lease_left, script_wait = int(result[0]), int(result[1])
            self.busy_ttl = lease_left / 1000 if lease_left >= 0 else None
            if not busy_signalled:
                busy_signalled = True
                self._send(signals.lock_busy, None)
            if not wait_ms:  # not queued: not blocking, or the deadline passed
                return None
            # Wait for the grant until the script's wait ends (the lease, for the first
            # waiter); a nudge (this waiter is first now) moves that end without a request.
            look_again = time.monotonic() + script_wait / 1000 + 0.001
            while True:
                now = time.monotonic()
                pause = look_again - now if deadline is None else min(look_again, deadline) - now
                message = yield _AwaitGrant(max(0.0, pause))
                if isinstance(message, waiting.Grant):
                    return _Acquired(message.token, handed_over=True)
                if not isinstance(message, waiting.Nudge):
                    break  # time is up, or told to look again
                look_again = min(look_again, time.monotonic() + message.lease_ms / 1000 + 0.001)

    def _leave(self, secret: str, *, now: bool) -> None:
        """Free what an attempt of ``secret`` may have got, or take it out of the queue: at
        once when Redis is fine (``now``), else through the watchdog once Redis answers."""
        args: list[Any] = [secret, lock_settings.tombstone_ms]
        if now:
            try:
                self._backend.scripts.leave(keys=self._keys.all, args=args)
                return
            except Exception:  # Redis failed meanwhile: the watchdog settles it later
                pass
        runtime().watchdog.settle(Leave(self._backend, self._keys, args))

    async def _aleave(self, secret: str, *, now: bool) -> None:
        """:meth:`_leave` for async code."""
        args: list[Any] = [secret, lock_settings.tombstone_ms]
        if now:
            _, scripts = self._backend.async_client()
            try:
                await scripts.leave(keys=self._keys.all, args=args)
                return
            except Exception:  # as in _leave()
                pass
        runtime().watchdog.settle(Leave(self._backend, self._keys, args))

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

    def _confirm_args(self) -> list[Any]:
        """EXTEND's arguments to ask Redis whether this object's hold still stands before a
        second acquire: a reentrant one renews the lease to its timeout, another only asks."""
        return [self._secret, self._timeout_ms, "atleast" if self._reentrant else "check"]

    def _confirmed(self, left: int) -> bool:
        """Whether the hold still stands (``left``: its lease, 0 when it ended); an ended hold
        is marked lost, and the acquire goes on afresh."""
        if left:
            if self._hold is not None:
                self._hold.renewed(time.monotonic(), left)
            return True
        self._mark_lost()()
        self._forget()
        return False

    def _reenter(self) -> bool:
        if not self._reentrant:
            raise LockError(
                f"This Lock object already holds {self.name!r}; pass reentrant=True to "
                "acquire it again, or create a new Lock for another critical section."
            )
        self._depth += 1
        return True

    def _took(self, secret: str, acquired: _Acquired | None) -> bool:
        if acquired is None:
            return False
        self._secret, self._depth = secret, 1
        self.fencing_token, self.lost = acquired.token, False
        # A handed-over lease is short; the watchdog lengthens it to the full TTL at a third
        # of it, as it renews any lease (a hold released sooner costs no extra request).
        confirm = acquired.handed_over and self._timeout_ms > HANDOVER_LEASE_MS
        if self._auto_renew or confirm:
            lease_ms = min(self._timeout_ms, HANDOVER_LEASE_MS) if confirm else self._timeout_ms
            self._hold = Hold(
                self,
                self._backend,
                self._keys,
                secret,
                self._timeout_ms,
                lease_ms,
                repeat=self._auto_renew,
            )
            runtime().watchdog.add(self._hold)
        logger.debug("Acquired lock %r (fencing token %s).", self.name, self.fencing_token)
        self._send(signals.lock_acquired, self.fencing_token)
        return True

    # -- release ---------------------------------------------------------------------------

    def release(self) -> None:
        """Release the lock; LockNotOwned if this object does not hold it."""
        secret = self._release_begin()
        if secret is None:
            return
        args = [secret, lock_settings.tombstone_ms]
        self._release_end(self._call(self._backend.scripts.release, self._keys.all, args))

    async def arelease(self) -> None:
        """:meth:`release` for async code."""
        secret = self._release_begin()
        if secret is None:
            return
        _, scripts = self._backend.async_client()
        args = [secret, lock_settings.tombstone_ms]
        self._release_end(await self._acall(scripts.release, self._keys.all, args))

    def _release_begin(self) -> str | None:
        """The secret to release with, or None when an inner reentrant hold just ended."""
        secret = self._owned_secret()
        if self._depth > 1 and not self.lost:
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
        args, sent = self._extend_args(additional_time, replace_ttl), time.monotonic()
        self._extend_end(self._call(self._backend.scripts.extend, [self._keys.lock], args), sent)

    async def aextend(
        self, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """:meth:`extend` for async code."""
        args, sent = self._extend_args(additional_time, replace_ttl), time.monotonic()
        _, scripts = self._backend.async_client()
        self._extend_end(await self._acall(scripts.extend, [self._keys.lock], args), sent)

    def _extend_args(self, additional_time: float | None, replace_ttl: bool) -> list[Any]:
        ms = (
            self._timeout_ms
            if additional_time is None
            else seconds_to_ms(additional_time, "additional_time")
        )
        mode = "replace" if validate_flag(replace_ttl, "replace_ttl") else "add"
        secret = self._owned_secret()
        if self.lost:
            raise LockNotOwned(f"The lock {self.name!r} was lost; it cannot be extended.")
        return [secret, ms, mode]

    def _extend_end(self, left: int, sent: float) -> None:
        if left and self._hold is not None:
            self._hold.renewed(sent, left)
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
        """Whether this object holds the lock (asks Redis: an expired hold is not owned).

        A hold found taken away is marked lost (once), as the watchdog, ``extend()`` and
        ``release()`` do: ``lost`` becomes True, a warning is logged, ``lock_lost`` is sent.
        """
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
        secret = self._secret or ""
        if holder == (secret.encode() if isinstance(holder, bytes) else secret):
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
            runtime().watchdog.remove(self._hold)
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
        if not signal.receivers:  # the common case, on the hot path: nothing to build
            return
        # A failing receiver must not leave a lock held or stop the watchdog: log, go on.
        responses = signal.send_robust(sender=Lock, lock=self, name=self.name, fencing_token=token)
        for receiver, response in responses:
            if isinstance(response, Exception):
                logger.error(
                    "Receiver %r of a lock signal for %r raised.",
                    receiver,
                    self.name,
                    exc_info=response,
                )

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
        except LockError:
            if exc_type is None:
                raise
            logger.warning(
                "Lock %r: release failed while an exception propagated.", self.name, exc_info=True
            )

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
        except LockError:
            if exc_type is None:
                raise
            logger.warning(
                "Lock %r: release failed while an exception propagated.", self.name, exc_info=True
            )
