"""What the watchdog looks after: holds to renew (:class:`Hold`) and calls to settle
(:class:`Settle`); ``watchdog.py`` runs them."""

from __future__ import annotations

import time
import weakref
from typing import Protocol

from django_redis_lock.backends.base import Backend, LockKeys
from django_redis_lock.conf import lock_settings

# Renew when this fraction of the TTL has passed since the last renewal.
RENEW_FRACTION = 1 / 3
# The shortest pause between two failed renewals of a lock.
MIN_RETRY_SECONDS = 0.05
# How long an attempt is tried at most to be settled.
SETTLE_GIVE_UP_SECONDS = 600.0


class HoldOwner(Protocol):
    """What the watchdog asks of the Lock whose hold it renews."""

    fencing_token: int | None

    def hold_lost(self, secret: str, cause: str) -> None:
        """The hold of ``secret`` was found gone, or could not be renewed in time (``cause``:
        a metrics cause); called from the watchdog's thread, outside its lock."""


class Hold:
    """One acquisition under the watchdog's care."""

    __slots__ = (
        "backend",
        "due",
        "first",
        "keys",
        "lease_end",
        "name",
        "owner",
        "repeat",
        "secret",
        "ttl_ms",
        "watched",
    )

    def __init__(
        self,
        name: str,
        owner: weakref.ref[HoldOwner],
        backend: Backend,
        keys: LockKeys,
        secret: str,
        ttl_ms: int,
        lease_ms: int,
        *,
        repeat: bool,
    ) -> None:
        self.name = name
        # The Lock, weakly: dead once the Lock object is dropped unreleased, which stops its
        # renewals (the lease then runs out on its own). A bare weak reference: a WeakMethod
        # costs several objects more on the path of every acquire.
        self.owner = owner
        self.backend = backend
        self.keys = keys
        self.secret = secret
        self.ttl_ms = ttl_ms
        self.repeat = repeat  # False: lengthen a hand-over lease once, then leave it alone
        now = time.monotonic()
        # When the lease surely ends, by this process's clock, as of the last renewal sent.
        self.lease_end = now + lease_ms / 1000
        # Seconds to the first renewal: a third of the lease the hold starts with, which is
        # shorter than the TTL for a hand-over.
        self.first = lease_ms / 1000 * RENEW_FRACTION
        self.due = now + self.first  # when the first renewal is due
        # False once released (or lost, or confirmed for good): the watchdog drops it.
        self.watched = True

    @property
    def interval(self) -> float:
        """Seconds between renewals."""
        return self.ttl_ms / 1000 * RENEW_FRACTION

    def renewed(self, sent: float, left_ms: int) -> None:
        """Record a renewal or extend sent at ``sent`` that left ``left_ms`` of lease."""
        self.lease_end = max(self.lease_end, sent + left_ms / 1000)

    def renew(self) -> int:
        """Renew the lease on Redis to at least the TTL, from the watchdog's thread; the lease
        left in ms, 0 when the hold is gone. A public seam: a hold of several names (see
        ``many/``) renews them all in its own way."""
        backend = self.backend
        args = [self.secret, self.ttl_ms, "atleast", lock_settings.stats]
        # With WAIT_REPLICAS a renewal counts once replicas have it: a failover to one that
        # lacks it would end the hold at its old lease (LockNotReplicated: retried).
        run = backend.run_acked if backend.wait_replicas else backend.run
        left: int = run(self.keys.script("extend"), (self.keys.lock, self.keys.stats), args)
        return left

    def give_back(self) -> list[Settle]:
        """The calls that give the hold back once Redis answers, when it could not be renewed
        before its lease ended (Redis may still have it, renewed)."""
        args: list[object] = [self.secret, lock_settings.tombstone_ms]
        return [Settle(self.backend, self.keys, args, self.keys.script("release"))]


class Settle:
    """A call whose outcome its caller never learned, to settle: an acquire attempt (LEAVE:
    free what it may have got, or take it out of the queue) or a release (RELEASE again)."""

    __slots__ = ("args", "backend", "delay", "give_up", "keys", "script", "watched")

    def __init__(
        self, backend: Backend, keys: LockKeys, args: list[object], script: str = "leave"
    ) -> None:
        self.backend = backend
        self.keys = keys
        self.args = args  # the script's: secret, tombstone ms
        self.script = script
        self.give_up = time.monotonic() + SETTLE_GIVE_UP_SECONDS
        self.delay = MIN_RETRY_SECONDS
        self.watched = True
