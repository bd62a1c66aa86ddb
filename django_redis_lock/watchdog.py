"""The watchdog: one thread per process keeping auto-renewed locks alive while they are held.

Each hold is renewed at about a third of its TTL (to at least the TTL, never shortening a
longer ``extend()``). A renewal that finds the lock gone marks the hold lost, sends
``lock_lost`` and logs a warning. The watchdog keeps only a weak reference to each Lock, so
a Lock object dropped without release stops being renewed and expires on its own. After
``fork`` the child starts with an empty watchdog: it never renews its parent's locks.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Protocol

import redis

from django_redis_lock.backends import LockBackend, LockKeys

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger("django_redis_lock")

# Renew when this fraction of the TTL has passed since the last renewal.
RENEW_FRACTION = 1 / 3
# The shortest pause between two failed renewals of a lock.
_MIN_RETRY_SECONDS = 0.05


class Renewable(Protocol):
    """What the watchdog needs of a lock: a way to tell it that its hold was lost."""

    name: str

    def _mark_lost(self) -> Callable[[], None]: ...


class Hold:
    """One acquisition under the watchdog's care."""

    __slots__ = ("backend", "first", "keys", "lease_end", "lock", "repeat", "secret", "ttl_ms")

    def __init__(
        self,
        lock: Renewable,
        backend: LockBackend,
        keys: LockKeys,
        secret: str,
        ttl_ms: int,
        lease_ms: int,
        *,
        repeat: bool,
    ) -> None:
        self.lock = weakref.ref(lock)
        self.backend = backend
        self.keys = keys
        self.secret = secret
        self.ttl_ms = ttl_ms
        self.repeat = repeat  # False: lengthen a hand-over lease once, then leave it alone
        # When the lease surely ends, by this process's clock, as of the last renewal sent.
        self.lease_end = time.monotonic() + lease_ms / 1000
        # Seconds to the first renewal: a third of the lease the hold starts with, which is
        # shorter than the TTL for a hand-over.
        self.first = lease_ms / 1000 * RENEW_FRACTION

    @property
    def interval(self) -> float:
        """Seconds between renewals."""
        return self.ttl_ms / 1000 * RENEW_FRACTION

    def renewed(self, sent: float, left_ms: int) -> None:
        """Record a renewal or extend sent at ``sent`` that left ``left_ms`` of lease."""
        self.lease_end = max(self.lease_end, sent + left_ms / 1000)


class Watchdog:
    """Renews every registered hold from a single daemon thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: set[Hold] = set()
        self._due: list[tuple[float, int, Hold]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        # When the thread wakes next on its own; a hold due later needs no wake-up call.
        self._wakes_at = float("inf")
        # When the last released hold it dropped would have been due. With nothing left to
        # renew, the thread sleeps until then rather than for good, so that the next hold, due
        # about as late, needs no wake-up call: a lock taken and released in a loop wakes it
        # rarely.
        self._quiet_until = float("-inf")

    def add(self, hold: Hold) -> None:
        """Start renewing ``hold``, first at a third of the lease it starts with."""
        with self._cond:
            self._active.add(hold)
            self._schedule(hold, time.monotonic() + hold.first)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="django_redis_lock-watchdog", daemon=True
                )
                self._thread.start()

    def remove(self, hold: Hold) -> None:
        """Stop renewing ``hold``: no renewal is sent for it after this returns."""
        with self._cond:
            self._active.discard(hold)

    def renewing(self, hold: Hold) -> bool:
        """Whether ``hold`` is still being renewed."""
        with self._cond:
            return hold in self._active

    def _schedule(self, hold: Hold, when: float) -> None:
        if len(self._due) > 2 * len(self._active) + 64:  # released holds pile up: drop them
            self._due = [entry for entry in self._due if entry[2] in self._active]
            heapq.heapify(self._due)
        heapq.heappush(self._due, (when, next(self._order), hold))
        if when < self._wakes_at:
            self._cond.notify()

    def _next_batch(self) -> list[Hold]:
        """Wait until some holds are due and return them."""
        with self._cond:
            while True:
                while self._due and self._due[0][2] not in self._active:
                    self._quiet_until = heapq.heappop(self._due)[0]
                now = time.monotonic()
                if self._due:
                    wake = self._due[0][0]
                else:
                    wake = self._quiet_until if self._quiet_until > now else float("inf")
                if wake > now:
                    self._wakes_at = wake
                    self._cond.wait(None if wake == float("inf") else wake - now)
                    continue
                self._wakes_at = float("-inf")  # busy renewing: it looks at the heap again
                batch = []
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    hold = heapq.heappop(self._due)[2]
                    if hold in self._active:
                        batch.append(hold)
                return batch

    def _run(self) -> None:
        while True:
            for hold in self._next_batch():
                try:
                    self._renew(hold)
                except Exception:  # a bug must not end renewals for every lock
                    logger.exception("The lock watchdog failed to renew a lock.")
                    self.remove(hold)

    def _renew(self, hold: Hold) -> None:
        if hold.lock() is None:  # the Lock object is gone: let its lease run out
            self.remove(hold)
            return
        sent = time.monotonic()
        try:
            left = hold.backend.scripts.extend(
                keys=[hold.keys.lock], args=[hold.secret, hold.ttl_ms, "atleast"]
            )
        except redis.RedisError as exc:
            self._retry(hold, exc)
            return
        if not left:
            self._lose(hold)
            return
        with self._cond:
            hold.renewed(sent, left)
            if hold in self._active:
                if hold.repeat:
                    self._schedule(hold, sent + hold.interval)
                else:
                    self._active.discard(hold)

    def _retry(self, hold: Hold, exc: Exception) -> None:
        lock = hold.lock()
        name = lock.name if lock is not None else "?"
        now = time.monotonic()
        if now >= hold.lease_end:
            logger.warning("Could not renew lock %r before its lease ended: %s", name, exc)
            self._lose(hold)
            return
        logger.warning("Could not renew lock %r (%s); retrying before its lease ends.", name, exc)
        with self._cond:
            if hold in self._active:
                delay = min(hold.interval, max(_MIN_RETRY_SECONDS, (hold.lease_end - now) / 2))
                self._schedule(hold, now + delay)

    def _lose(self, hold: Hold) -> None:
        lock = hold.lock()
        with self._cond:
            if hold not in self._active:  # released meanwhile: not a loss
                return
            self._active.discard(hold)
            notify = lock._mark_lost() if lock is not None else None
        if notify is not None:
            notify()


_watchdog = Watchdog()


def watchdog() -> Watchdog:
    """This process's watchdog."""
    return _watchdog


def _after_fork_in_child() -> None:
    global _watchdog
    _watchdog = Watchdog()


os.register_at_fork(after_in_child=_after_fork_in_child)
