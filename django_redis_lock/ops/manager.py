"""LockManager: make locks, and see or force-release the held ones, whatever the topology.

:class:`LockManager` is the public face and holds what needs no knowledge of where the locks
live; its two kinds are siblings, each over its own backend: ``ServerLockManager`` (one cache
alias: a server, a Sentinel service or a cluster, in ``server_manager.py``) and
``QuorumLockManager`` (a quorum of aliases, in ``quorum_manager.py``).
:func:`~django_redis_lock.get_lock_manager` picks one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any

from django_redis_lock.backends.base import Backend
from django_redis_lock.core.drivers import redis_errors
from django_redis_lock.core.lock import Lock
from django_redis_lock.ops.records import Listing, LockInfo, LockPage, Released
from django_redis_lock.stats import LockStats
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.validation import validate_name

# Lists, spelt here: inside a manager, "list" is a method.
InfoList = list["LockInfo"]
ReleasedList = list["Released"]
StatsList = list[LockStats]
# Keys (or names) read per pipelined round trip while listing or clearing.
BATCH_SIZE = 500


class LockManager(abc.ABC):
    """The locks of one cache alias, or of a quorum of aliases; get one with
    :func:`~django_redis_lock.get_lock_manager`."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @property
    def alias(self) -> str:
        """The cache alias whose Redis holds these locks (a quorum's: its aliases, joined)."""
        return self._backend.alias

    @property
    @abc.abstractmethod
    def using(self) -> str | tuple[str, ...]:
        """What :func:`~django_redis_lock.lock` takes as ``using`` to reach these locks."""

    def lock(self, name: str, **options: Any) -> Lock:
        """A Lock named ``name`` (not yet acquired); options as for :func:`lock`."""
        return Lock(name, using=self.using, **options)

    @abc.abstractmethod
    def list(self, pattern: str = "*") -> Listing:
        """The held locks whose names match the glob ``pattern``, read with SCAN, and the
        active rate limits (kind "rate") where the topology has them.

        An iterator (a :class:`Listing`), read as it is iterated. Locks taken or released
        while it runs may or may not appear, as with SCAN itself. Held locks whose data this
        library did not write are skipped, with one warning that counts them.
        """

    @abc.abstractmethod
    def page(self, pattern: str = "*", cursor: str = "", size: int = 100) -> LockPage:
        """One page of held locks matching ``pattern``, from ``cursor`` on ("": the first);
        ``next_cursor`` is "" on the last page. Pages hold about ``size`` locks; a cursor
        this manager cannot go on from is refused (TypeError or ValueError)."""

    @abc.abstractmethod
    def check_cursor(self, cursor: object) -> str:
        """``cursor`` if :meth:`page` can go on from it: "" or a page's ``next_cursor``;
        else TypeError or ValueError."""

    @abc.abstractmethod
    def get(self, name: str) -> LockInfo | None:
        """The held lock named exactly ``name`` (glob characters are literal), or None; None
        also (with a warning) when its data is not what this library writes."""

    @abc.abstractmethod
    def holders(self, name: str) -> InfoList:
        """Every hold of ``name``: its lock's, and each holder of its semaphore or read/write
        lock where the topology has them, then its active rate limit (kind "rate"); skips
        (and warns of) what :meth:`list` skips."""

    @abc.abstractmethod
    def get_rate(self, name: str) -> LockInfo | None:
        """The active rate limit named exactly ``name`` (a LockInfo of kind "rate": its
        ``rate`` says how full it is), or None (a quorum has none)."""

    @abc.abstractmethod
    def reset_rate(self, name: str) -> Released | None:
        """Empty the rate limit ``name`` (delete its state: its next calls are admitted as
        after a quiet spell); what it was, or None when it had none."""

    def release(self, name: str) -> bool:
        """Force-release ``name`` whoever holds it (every holder of a semaphore or read/write
        lock), waking its waiters, and reset its rate limit; True if anything was held or
        active. :meth:`release_all` says what."""
        return bool(self.release_all(name))

    @abc.abstractmethod
    def release_all(self, name: str) -> ReleasedList:
        """Force-release every hold of ``name`` and reset its rate limit; what was released."""

    @abc.abstractmethod
    def force_release(self, name: str, fencing_token: int | None = None) -> Released | None:
        """Force-release ``name``, waking its waiters; what was released, or None if not held.
        With ``fencing_token``, only that hold is released: a lock taken over meanwhile by
        someone else is left alone. Without one, a name with no hold but an active rate limit
        has its rate limit reset."""

    @abc.abstractmethod
    def clear(self, pattern: str = "*", progress: Callable[[int, int], None] | None = None) -> int:
        """Force-release the held locks :meth:`list` shows for ``pattern``, each by its fencing
        token (a hold taken while the clear runs is left to its holder), and reset the rate
        limits it shows; how many.
        ``progress(released, handed_over)`` is called after each batch."""

    @abc.abstractmethod
    def stats(self, pattern: str = "*") -> StatsList:
        """The statistics of the lock names matching ``pattern`` that have any (see
        ``stats.py``), sorted by name."""

    @abc.abstractmethod
    def iter_stats(self, pattern: str = "*") -> Iterator[LockStats]:
        """:meth:`stats` as they are read, in no order."""

    def get_stats(self, name: str) -> LockStats | None:
        """The statistics of the lock named exactly ``name``, or None when it has none (on a
        quorum, those a majority of the primaries backs)."""
        key = self._backend.keys_for(validate_name(name)).stats
        with redis_errors("Could not read lock statistics"):
            flat = self._backend.run("stats_read", (key,), ())
        return parse_stats(name, flat)
