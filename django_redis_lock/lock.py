"""The Lock: acquire, release and extend one named lock, from sync or async code.

Ownership belongs to the Lock object: each acquisition gets a random secret, and only the
object that holds it can release or extend that hold. Create one Lock per critical section
(``with lock("name"):``); a Lock object is not meant to be shared by concurrent threads or
tasks.

Each operation is written once, as a flow (a generator of steps, see ``drivers.py``); the
public methods hand it to the sync or the async driver, and only the drivers talk to Redis.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import weakref
from collections.abc import Sequence
from typing import Any

from django_redis_lock import quorum, signals, waiting
from django_redis_lock.conf import lock_settings
from django_redis_lock.drivers import adrive, drive
from django_redis_lock.exceptions import (
    LateGrant,
    LockBusy,
    LockError,
    LockNotOwned,
    LockNotReplicated,
    LockUnavailable,
)
from django_redis_lock.runtime import runtime
from django_redis_lock.scripts import decode_read
from django_redis_lock.stats import LockStats
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.steps import Call, Flow
from django_redis_lock.validation import (
    refuse_contradiction,
    seconds_to_ms,
    validate_blocking_timeout,
    validate_flag,
    validate_label,
    validate_name,
    validate_timeout,
    validate_using,
    wait_options,
)
from django_redis_lock.watchdog import Hold, Leave

logger = logging.getLogger("django_redis_lock")


def _new_secret() -> str:
    """128 random bits from the OS, as hex: the secret of one acquisition."""
    return os.urandom(16).hex()  # what secrets.token_hex(16) does, minus two calls


class Lock:
    """A named distributed lock, not yet acquired; use it in ``with`` or call ``acquire()``.

    ``timeout`` is the lease in seconds (None: REDIS_LOCK TIMEOUT; "auto": the timeout the lock's
    statistics suggest once they know enough, REDIS_LOCK TIMEOUT before); ``blocking_timeout`` caps
    the wait (None: no limit); ``auto_renew`` keeps the lease alive while held (None:
    REDIS_LOCK AUTO_RENEW); ``reentrant`` lets the same object acquire again; ``label`` is
    shown to operators; ``using`` picks the cache alias (None: REDIS_LOCK CACHE).
    ``django_redis_lock.lock`` is this class.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout: float | str | None = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool | None = None,
        reentrant: bool = False,
        label: str | None = None,
        using: str | Sequence[str] | None = None,
    ) -> None:
        self.name = validate_name(name)
        ms = validate_timeout(timeout, "timeout") if timeout is not None else None
        #: Whether the timeout is the statistics' suggestion (``timeout="auto"``).
        self._auto_timeout = lock_settings.auto_timeout if timeout is None else ms is None
        # Until the statistics suggest one (``auto``): REDIS_LOCK TIMEOUT (30 s for "auto").
        self._timeout_ms = lock_settings.timeout_ms if ms is None else ms
        self._blocking = validate_flag(blocking, "blocking")
        self._blocking_timeout = validate_blocking_timeout(blocking_timeout)
        refuse_contradiction(self._blocking, self._blocking_timeout)
        self._auto_renew = (
            lock_settings.auto_renew
            if auto_renew is None
            else validate_flag(auto_renew, "auto_renew")
        )
        self._reentrant = validate_flag(reentrant, "reentrant")
        self.label = validate_label(label)
        self._backend = runtime().for_locks(validate_using(using))
        self._keys = self._backend.keys_for(self.name)
        self._secret: str | None = None
        self._depth = 0
        self._hold: Hold | None = None
        #: The fencing token of this object's current hold; None when it holds nothing.
        self.fencing_token: int | None = None
        #: True once a call found the hold taken away (see the README).
        self.lost = False
        #: Seconds left of the holder's lease when this object last found the lock busy.
        self.busy_ttl: float | None = None
        #: Seconds the holder had held the lock then (None: not known).
        self.busy_held: float | None = None
        # How long the current hold's acquire waited for another holder, recorded by its
        # release (ms), and whether the acquire under way found the lock held.
        self._waited_ms, self._was_busy = 0, False

    def __repr__(self) -> str:
        state = "held" if self._secret is not None else "not held"
        return f"<Lock {self.name!r} {state}>"

    @property
    def timeout(self) -> float:
        """The lease in seconds: how long the lock lives unless renewed."""
        return self._timeout_ms / 1000

    # -- the public methods: each hands its flow to a driver -------------------------------

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take the lock; wait for it unless ``blocking`` is False; True when taken."""
        wait, limit = wait_options(
            blocking, blocking_timeout, self._blocking, self._blocking_timeout
        )
        if wait and limit != 0 and asyncio._get_running_loop() is not None:
            raise RuntimeError(
                f"Lock.acquire() of {self.name!r} would block the running event loop while it "
                "waits: use `await lock.aacquire()` (or `async with`), or acquire(blocking=False)."
            )
        owner = runtime().thread_owner()
        return drive(self._backend, self._acquiring(wait, limit, owner), self.name)

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code: waiting never blocks the event loop."""
        wait, limit = wait_options(
            blocking, blocking_timeout, self._blocking, self._blocking_timeout
        )
        owner = runtime().task_owner()
        return await adrive(self._backend, self._acquiring(wait, limit, owner), self.name)

    def release(self) -> None:
        """Release the lock; LockNotOwned if this object does not hold it."""
        drive(self._backend, self._releasing(), self.name)

    async def arelease(self) -> None:
        """:meth:`release` for async code."""
        await adrive(self._backend, self._releasing(), self.name)

    def extend(self, additional_time: float | None = None, *, replace_ttl: bool = False) -> None:
        """Lengthen the lease by ``additional_time`` seconds (None: the lock's timeout).

        With ``replace_ttl=True`` the lease becomes exactly ``additional_time`` from now.
        """
        drive(self._backend, self._extending(additional_time, replace_ttl), self.name)

    async def aextend(
        self, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """:meth:`extend` for async code."""
        await adrive(self._backend, self._extending(additional_time, replace_ttl), self.name)

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return drive(self._backend, self._locked(), self.name)

    async def alocked(self) -> bool:
        """:meth:`locked` for async code."""
        return await adrive(self._backend, self._locked(), self.name)

    def owned(self) -> bool:
        """Whether this object holds the lock (asks Redis: an expired hold is not owned).

        A hold found taken away is marked lost (once), as the watchdog, ``extend()`` and
        ``release()`` do: ``lost`` becomes True, a warning is logged, ``lock_lost`` is sent.
        """
        return drive(self._backend, self._owned(), self.name)

    async def aowned(self) -> bool:
        """:meth:`owned` for async code."""
        return await adrive(self._backend, self._owned(), self.name)

    def stats(self) -> LockStats | None:
        """The lock's hold and wait statistics (None: nothing recorded yet); read from Redis
        at most once a minute per process, as ``timeout="auto"`` and a busy view's
        Retry-After use them."""
        return drive(self._backend, self._statistics(), self.name)

    async def astats(self) -> LockStats | None:
        """:meth:`stats` for async code."""
        return await adrive(self._backend, self._statistics(), self.name)

    def ttl(self) -> float | None:
        """Seconds left of the lease, or None when nobody holds the lock (``math.inf`` for a
        held lock whose key lost its expiry, as :class:`LockInfo` shows it)."""
        return drive(self._backend, self._ttl(), self.name)

    async def attl(self) -> float | None:
        """:meth:`ttl` for async code."""
        return await adrive(self._backend, self._ttl(), self.name)

    # -- acquire ---------------------------------------------------------------------------

    def _acquiring(self, wait: bool, limit: float | None, owner: str) -> Flow[bool]:
        """A second acquire asks Redis whether the hold stands; then take the lock afresh.

        Whatever interrupts the attempts (an interrupt, a cancellation, Redis failing) gives
        back what they may have got: at once, or through the watchdog when Redis failed.
        """
        if self._holding():
            left = yield Call("extend", (self._keys.lock,), self._confirm_args(), acked=True)
            if self._confirmed(left):
                return self._reenter()
        if self._auto_timeout:
            stats = yield from self._statistics()
            suggested = None if stats is None else stats.suggested_timeout
            self._timeout_ms = (
                lock_settings.timeout_ms if suggested is None else round(suggested * 1000)
            )
        secret, started, self._was_busy = _new_secret(), time.monotonic(), False
        args = [secret, self._timeout_ms, owner, self.label or ""]
        # Where grants for this process arrive: only a waiter queues, and needs one.
        channel = runtime().listener(self._backend).channel if wait else ""
        try:
            attempts = quorum.attempts if self._backend.quorum else waiting.attempts
            acquired = yield from attempts(
                self._keys,
                args,
                channel,
                wait,
                limit,
                self._busy,
                self._backend.wait_replicas > 0,
                lock_settings.stats,
            )
        except LateGrant:  # given back already
            raise
        except LockNotReplicated as exc:  # Redis answers: give the hold back at once
            yield from self._leaving(secret, now=True)
            raise LockNotReplicated(
                f"{exc}; the hold was given back.", exc.acknowledged, exc.needed
            ) from exc
        except BaseException as exc:
            yield from self._leaving(secret, now=not isinstance(exc, LockUnavailable))
            raise
        # Only an acquire that found the lock held waited (a first call's connecting is not).
        self._waited_ms = round((time.monotonic() - started) * 1000) if self._was_busy else 0
        return self._took(secret, acquired)

    def _leaving(self, secret: str, *, now: bool) -> Flow[None]:
        """Free what an attempt of ``secret`` may have got, or take it out of the queue: at
        once when Redis is fine (``now``), else through the watchdog once Redis answers."""
        args: list[Any] = [secret, lock_settings.tombstone_ms]
        if now:
            try:
                yield Call("leave", self._keys.all, args)
                return
            except Exception:  # Redis failed meanwhile: the watchdog settles it later
                pass
        runtime().watchdog.settle(Leave(self._backend, self._keys, args))

    def _busy(self, lease_left_ms: int, first: bool, held_ms: int = -1) -> None:
        """An attempt found the lock busy: note the holder's lease and how long it has held
        the lock (-1: unknown); signal it once a call."""
        self._was_busy = True
        self.busy_ttl = lease_left_ms / 1000 if lease_left_ms >= 0 else None
        self.busy_held = held_ms / 1000 if held_ms >= 0 else None
        if first:
            signals.send(signals.lock_busy, self, None)

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
        self._lose()
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

    def _took(self, secret: str, acquired: waiting.Acquired | None) -> bool:
        if acquired is None:
            return False
        secret = acquired.secret or secret  # a quorum attempt's own
        self._secret, self._depth = secret, 1
        self.fencing_token, self.lost = acquired.token, False
        # A handed-over lease is short; the watchdog lengthens it to the full TTL at a third
        # of it, as it renews any lease (a hold released sooner costs no extra request).
        handover_lease_ms = self._backend.handover_lease_ms
        confirm = acquired.handed_over and self._timeout_ms > handover_lease_ms
        if self._auto_renew or confirm:
            lease_ms = handover_lease_ms if confirm else self._timeout_ms
            self._hold = Hold(
                self.name,
                weakref.WeakMethod(self._lost_by_watchdog),
                self._backend,
                self._keys,
                secret,
                self._timeout_ms,
                lease_ms,
                repeat=self._auto_renew,
            )
            runtime().watchdog.add(self._hold)
        logger.debug("Acquired lock %r (fencing token %s).", self.name, self.fencing_token)
        signals.send(signals.lock_acquired, self, self.fencing_token)
        return True

    # -- release and extend ----------------------------------------------------------------

    def _releasing(self) -> Flow[None]:
        secret = self._owned_secret()
        if self._depth > 1 and not self.lost:  # an inner reentrant hold ends
            self._depth -= 1
            return
        self._stop_renewing()
        if self.lost:
            self._forget()
            raise LockNotOwned(f"The lock {self.name!r} was lost before this release.")
        args: list[Any] = [
            secret,
            lock_settings.tombstone_ms,
            lock_settings.stats,
            self._waited_ms,
            self._timeout_ms,
        ]
        try:
            released = yield Call("release", self._keys.all, args)  # 3: a retry of this release
        except BaseException:  # it may not have run: the watchdog runs it again once Redis is
            # back (a retry by this object then finds the lock released by it, quietly)
            runtime().watchdog.settle(Leave(self._backend, self._keys, args, "release"))
            raise
        token = self.fencing_token
        self._forget()
        if not released:
            self._lose(token)
            raise LockNotOwned(
                f"The lock {self.name!r} was no longer held by this Lock object "
                "(it expired or was force-released) when it was released."
            )
        logger.debug("Released lock %r.", self.name)
        signals.send(signals.lock_released, self, token)

    def _extending(self, additional_time: float | None, replace_ttl: bool) -> Flow[None]:
        ms = (
            self._timeout_ms
            if additional_time is None
            else seconds_to_ms(additional_time, "additional_time")
        )
        mode = "replace" if validate_flag(replace_ttl, "replace_ttl") else "add"
        secret = self._owned_secret()
        if self.lost:
            raise LockNotOwned(f"The lock {self.name!r} was lost; it cannot be extended.")
        sent = time.monotonic()
        keys, record = (self._keys.lock, self._keys.stats), lock_settings.stats
        left = yield Call("extend", keys, [secret, ms, mode, record], acked=True)
        if not left:
            self._lose()
            raise LockNotOwned(f"The lock {self.name!r} is no longer held by this Lock object.")
        if self._hold is not None:
            self._hold.renewed(sent, left)

    # -- state -----------------------------------------------------------------------------

    def _reading(self) -> Flow[tuple[Any, int]]:
        """The holder's secret (False: none) and the lease left in ms, as Redis has them."""
        values = decode_read((yield Call("read", (self._keys.lock,), ())))
        return values[0], values[5]

    def _statistics(self) -> Flow[LockStats | None]:
        """The lock's statistics, read at most once a minute per process (see stats.py)."""
        key = (self._backend, self.name)
        hit, found = runtime().recent_stats.get(key)
        if not hit:
            found = parse_stats(self.name, (yield Call("stats_read", (self._keys.stats,), ())))
            runtime().recent_stats.put(key, found)
        return found

    def _locked(self) -> Flow[bool]:
        holder, _ = yield from self._reading()
        return bool(holder)

    def _owned(self) -> Flow[bool]:
        if not self._holding():
            return False
        holder, _ = yield from self._reading()
        if holder == self._secret:
            return True
        self._lose()
        return False

    def _ttl(self) -> Flow[float | None]:
        holder, left = yield from self._reading()
        if not holder:
            return None
        return math.inf if left == -1 else max(left, 0) / 1000  # -1: the key lost its expiry

    def _owned_secret(self) -> str:
        if self._secret is None:
            raise LockNotOwned(f"This Lock object does not hold {self.name!r}.")
        return self._secret

    def _stop_renewing(self) -> None:
        hold, self._hold = self._hold, None  # the watchdog's thread may be here at once
        if hold is not None:
            runtime().watchdog.remove(hold)

    def _forget(self) -> None:
        self._stop_renewing()
        self._secret, self._depth, self.fencing_token = None, 0, None

    def _lose(self, token: int | None = None) -> None:
        """Record that the hold was taken away: lost, no more renewals, a warning, lock_lost;
        once per hold, whoever finds it first."""
        if self.lost:
            return
        token = self.fencing_token if token is None else token
        self.lost = True
        self._stop_renewing()
        logger.warning(
            "Lock %r (fencing token %s) was lost: it expired or was force-released.",
            self.name,
            token,
        )
        signals.send(signals.lock_lost, self, token)

    def _lost_by_watchdog(self, secret: str) -> None:
        """The watchdog found the hold of ``secret`` gone (from its thread): a loss, unless
        this object released that hold, or took another, meanwhile."""
        if secret == self._secret:
            self._lose()

    # -- context managers ----------------------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockBusy(f"The lock {self.name!r} is held by someone else.")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.release()
        except LockError:
            self._release_failed_on_exit(exc_type)

    async def __aenter__(self) -> Lock:
        if not await self.aacquire():
            raise LockBusy(f"The lock {self.name!r} is held by someone else.")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            await self.arelease()
        except LockError:
            self._release_failed_on_exit(exc_type)

    def _release_failed_on_exit(self, exc_type: type[BaseException] | None) -> None:
        """A clean exit raises the release's error; one with an exception keeps it, logged."""
        if exc_type is None:
            raise
        logger.warning(
            "Lock %r: release failed while an exception propagated.", self.name, exc_info=True
        )
