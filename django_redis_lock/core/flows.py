"""A Lock's state, and the flows of its operations: each written once, as a generator of the
steps it needs (run a script, listen for a grant, wait), which the sync and the async driver
take to Redis (``drivers.py``). :class:`~django_redis_lock.core.lock.Lock` adds its options and
its public face; nothing here does I/O itself.
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref
from typing import Any

from django_redis_lock import metrics, signals
from django_redis_lock.backends.base import Backend, LockKeys
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.attempts import Acquired, Attempt, attempts_for
from django_redis_lock.core.steps import Call, Flow
from django_redis_lock.exceptions import (
    LateGrant,
    LockError,
    LockNotOwned,
    LockNotReplicated,
    LockUnavailable,
)
from django_redis_lock.runtime import runtime
from django_redis_lock.runtime.holds import Hold, Settle
from django_redis_lock.scripts import decode_read
from django_redis_lock.stats import LockStats
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.validation import (
    extend_options,
)

logger = logging.getLogger("django_redis_lock")

#: What the release scripts answer when they handed the lock to a waiter.
HANDED_OVER = 2


def new_secret() -> str:
    """128 random bits from the OS, as hex: the secret of one acquisition."""
    return os.urandom(16).hex()  # what secrets.token_hex(16) does, minus two calls


class LockFlows:
    """The state of a Lock's hold and the flows of its operations (see the module)."""

    name: str
    label: str | None
    template: str | None
    fencing_token: int | None
    lost: bool
    _losing: bool
    busy_ttl: float | None
    busy_held: float | None
    _backend: Backend
    _keys: LockKeys
    _timeout_ms: int
    _auto_timeout: bool
    _auto_renew: bool
    _reentrant: bool
    _secret: str | None
    _depth: int
    _hold: Hold | None
    _waited_ms: int
    _was_busy: bool
    _metered: metrics.HoldRecord | None
    _label: str | None

    # -- acquire ---------------------------------------------------------------------------

    def _acquiring(self, wait: bool, limit: float | None, owner: str) -> Flow[bool]:
        """A second acquire asks Redis whether the hold stands; then take the lock afresh.

        Whatever interrupts the attempts (an interrupt, a cancellation, Redis failing) gives
        back what they may have got: at once, or through the watchdog when Redis failed.
        """
        if self._holding():
            extend = self._keys.script("extend")
            left = yield Call(extend, (self._keys.lock,), self._confirm_args(), acked=True)
            if self._confirmed(left):
                return self._reenter()
        if self._auto_timeout:
            stats = yield from self._statistics()
            suggested = None if stats is None else stats.suggested_timeout
            self._timeout_ms = (
                lock_settings.timeout_ms if suggested is None else round(suggested * 1000)
            )
        secret, started, self._was_busy = new_secret(), time.monotonic(), False
        args = [secret, self._timeout_ms, owner, self.label or ""]
        # Where grants for this process arrive: only a waiter queues, and needs one.
        channel = runtime().listener(self._backend).channel_for(self._keys) if wait else ""
        try:
            attempt = Attempt(
                self._keys,
                args,
                channel,
                wait,
                limit,
                self._busy,
                self._backend.wait_replicas > 0,
                lock_settings.stats,
                self._acquire_extra(),
            )
            acquired = yield from attempts_for(self._backend)(attempt)
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

    def _acquire_extra(self) -> tuple[Any, ...]:
        """What the acquire script takes after a lock's arguments (a semaphore's kind and
        limit, see core/shared.py); a lock's takes nothing more."""
        return ()

    def _release_extra(self) -> tuple[Any, ...]:
        """What the release script takes after a lock's arguments (a shared hold's counter
        of its statistics, see core/shared.py); a lock's takes nothing more."""
        return ()

    def _leaving(self, secret: str, *, now: bool) -> Flow[None]:
        """Free what an attempt of ``secret`` may have got, or take it out of the queue: at
        once when Redis is fine (``now``), else through the watchdog once Redis answers."""
        args: list[Any] = [secret, lock_settings.tombstone_ms]
        if now:
            try:
                yield Call(self._keys.script("leave"), self._keys.all, args)
                return
            except Exception:  # Redis failed meanwhile: the watchdog settles it later
                pass
        leave = self._keys.script("leave")
        runtime().watchdog.settle(Settle(self._backend, self._keys, args, leave))

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

    def _took(self, secret: str, acquired: Acquired | None) -> bool:
        if acquired is None:
            return False
        secret = acquired.secret or secret  # a quorum attempt's own
        self._secret, self._depth = secret, 1
        self.fencing_token, self.lost, self._losing = acquired.token, False, False
        # A handed-over lease is short; the watchdog lengthens it to the full TTL at a third
        # of it, as it renews any lease (a hold released sooner costs no extra request).
        handover_lease_ms = self._backend.handover_lease_ms
        confirm = acquired.handed_over and self._timeout_ms > handover_lease_ms
        if self._auto_renew or confirm:
            lease_ms = handover_lease_ms if confirm else self._timeout_ms
            self._hold = Hold(
                self.name,
                weakref.ref(self),
                self._backend,
                self._keys,
                secret,
                self._timeout_ms,
                lease_ms,
                repeat=self._auto_renew,
            )
            runtime().watchdog.add(self._hold)
        logger.debug("Acquired lock %r (fencing token %s).", self.name, self.fencing_token)
        observed = metrics.observers()
        if observed:
            self._metered = metrics.began(self, self._metrics_label(), observed)
        signals.send(signals.lock_acquired, self, self.fencing_token)
        return True

    # -- release and extend ----------------------------------------------------------------

    def _releasing(self) -> Flow[bool]:
        """Release; True when the release handed the lock to a waiter."""
        secret = self._owned_secret()
        if self._depth > 1 and not self.lost:  # an inner reentrant hold ends
            self._depth -= 1
            return False
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
            *self._release_extra(),
        ]
        try:
            # 3: a retry of this release
            released = yield Call(self._keys.script("release"), self._keys.all, args)
        except BaseException:  # it may not have run: the watchdog runs it again once Redis is
            # back (a retry by this object then finds the lock released by it, quietly)
            release = self._keys.script("release")
            runtime().watchdog.settle(Settle(self._backend, self._keys, args, release))
            self._metrics_ended()  # this process holds it no more: the watchdog gives it back
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
        self._metrics_ended()
        signals.send(signals.lock_released, self, token)
        return bool(released == HANDED_OVER)

    def _extending(self, additional_time: float | None, replace_ttl: bool) -> Flow[None]:
        ms, mode = extend_options(additional_time, replace_ttl, self._timeout_ms)
        secret = self._owned_secret()
        if self.lost:
            raise LockNotOwned(f"The lock {self.name!r} was lost; it cannot be extended.")
        sent = time.monotonic()
        keys, record = (self._keys.lock, self._keys.stats), lock_settings.stats
        extend = self._keys.script("extend")
        left = yield Call(extend, keys, [secret, ms, mode, record], acked=True)
        if not left:
            self._lose()
            raise LockNotOwned(f"The lock {self.name!r} is no longer held by this Lock object.")
        if self._hold is not None:
            self._hold.renewed(sent, left)

    # -- state -----------------------------------------------------------------------------

    def _reading(self) -> Flow[tuple[Any, int]]:
        """The holder's secret (False: none) and the lease left in ms, as Redis has them."""
        read = Call(self._keys.script("read"), (self._keys.lock,), (self._secret or "",))
        values = decode_read((yield read))
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
        runtime().watchdog.discard(hold)

    def _forget(self) -> None:
        self._stop_renewing()
        self._secret, self._depth, self.fencing_token = None, 0, None

    def _lose(self, token: int | None = None, cause: str = metrics.EXPIRED) -> None:
        """Record that the hold was taken away: lost, no more renewals, a warning, lock_lost,
        the metrics (``cause``); once per hold, whoever finds it first."""
        if self.lost or self._losing:
            return
        self._losing = True
        token = self.fencing_token if token is None else token
        self._stop_renewing()
        logger.warning(
            "Lock %r (fencing token %s) was lost: it expired or was force-released.",
            self.name,
            token,
        )
        self._metrics_ended(cause)
        # Marked lost once counted: whoever sees ``lost`` sees the loss in the metrics too.
        self.lost = True
        signals.send(signals.lock_lost, self, token)

    def hold_lost(self, secret: str, cause: str = metrics.EXPIRED) -> None:
        """Called by the watchdog (from its thread) when it found the hold of ``secret`` gone,
        or could not renew it before its lease ended (``cause``): a loss, unless this object
        released that hold, or took another, meanwhile. Not for application code."""
        if secret == self._secret:
            self._lose(cause=cause)

    # -- metrics ---------------------------------------------------------------------------

    def _metrics_label(self) -> str:
        """This lock's ``lock`` label, asked of the metrics once a lock."""
        label = self._label
        if label is None:
            label = self._label = metrics.label_for(self.template)
        return label

    def _metrics_ended(self, cause: str | None = None) -> None:
        """The observers that saw the current hold begin see it end (``cause``: lost)."""
        record, self._metered = self._metered, None  # taken once: a release and a loss race
        if record is not None:
            metrics.ended(self, record, cause)
