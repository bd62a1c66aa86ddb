"""What one process keeps for its locks, in one place: connections, listeners, the watchdog.

There is one Runtime per process. A forked child starts with a new, empty one (the parent's
threads do not exist there, and its sockets are not the child's to use), and a change of the
CACHES or REDIS_LOCK setting (``override_settings`` in tests) drops the connections and stops
the listeners, so the next lock call builds them from the new settings. These are the only
fork hook and the only ``setting_changed`` receiver of the package.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_redis_lock import metrics
from django_redis_lock.backends import backend_for, quorum_backend
from django_redis_lock.backends.base import Backend, LockKeys
from django_redis_lock.backends.cluster import ClusterLockBackend
from django_redis_lock.backends.servers import warn_if_evicting
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.runtime.holds import Settle
from django_redis_lock.runtime.listener import CompositeListener, Listener
from django_redis_lock.runtime.shards import ShardedListener
from django_redis_lock.runtime.tickets import WakeUps
from django_redis_lock.runtime.watchdog import Watchdog
from django_redis_lock.stats import RecentStats
from django_redis_lock.validation import MAX_OWNER_LENGTH, Using, shorten, validate_using

logger = logging.getLogger("django_redis_lock")
_HOST = socket.gethostname()
# Owner texts remembered at most (see Runtime.thread_owner).
_OWNERS_LIMIT = 1024
K = TypeVar("K")
V = TypeVar("V")


class Runtime:
    """This process's connections (one per cache alias), listeners and watchdog."""

    def __init__(self) -> None:
        #: How owners name this process: host and pid.
        self.process = f"{_HOST} pid {os.getpid()}"
        #: Renews the held locks of this process, and settles interrupted attempts.
        self.watchdog = Watchdog()
        #: Statistics read lately (timeout="auto", Retry-After).
        self.recent_stats = RecentStats()
        self._backends: dict[str, Backend] = {}
        self._quorums: dict[tuple[str, ...], Backend] = {}
        self._listeners: dict[Backend, WakeUps] = {}
        # The backends whose servers were looked at for eviction (see for_locks).
        self._looked: set[Backend] = set()
        # for_locks() of the REDIS_LOCK CACHE, once looked at: the call of every lock(). A
        # reset() counts, so that a backend found before one is not kept after it.
        self._default: Backend | None = None
        self._resets = 0
        # The owner texts of this process's threads, by thread name.
        self._owners: dict[str, str] = {}
        self._mutex = threading.Lock()

    def backend(self, alias: Using = None) -> Backend:
        """The connection to the Redis of cache ``alias`` (None: the REDIS_LOCK CACHE); of a
        tuple of aliases, a quorum of their primaries."""
        if alias is None:
            alias = validate_using(lock_settings.CACHE, "REDIS_LOCK['CACHE']")
            assert alias is not None
        if isinstance(alias, tuple):
            return self._once(self._quorums, alias, self._quorum)
        return self._once(self._backends, alias, backend_for)

    def for_locks(self, alias: Using = None) -> Backend:
        """:meth:`backend`, for a Lock: the servers of each backend are looked at for eviction
        at its first lock of the process (production servers never run ``manage.py check``)."""
        if alias is None and self._default is not None:
            return self._default
        resets = self._resets
        backend = self.backend(alias)
        if backend not in self._looked:
            with self._mutex:
                first = backend not in self._looked
                self._looked.add(backend)
            if first:
                _look_for_eviction(backend)
        if alias is None:
            with self._mutex:
                if self._resets == resets:  # no reset meanwhile: still the setting's backend
                    self._default = backend
        return backend

    def _quorum(self, aliases: tuple[str, ...]) -> Backend:
        """A quorum of ``aliases``' backends, handed what it needs of this process."""

        def settle_call(backend: Backend, keys: LockKeys, args: list[object], script: str) -> None:
            self.watchdog.settle(Settle(backend, keys, args, script))

        return quorum_backend(
            aliases, self.backend, settle_call, lambda member: self.one_listener(member).channel
        )

    def listener(self, backend: Backend) -> WakeUps:
        """This process's listener for grants on ``backend`` (its threads start on demand): of
        one server, its own; of a cluster with sharded pub/sub, one over its shards; of a
        backend over several, theirs together."""
        return self._once(self._listeners, backend, self._new_listener)

    def one_listener(self, backend: Backend) -> Listener:
        """:meth:`listener` of a one-server backend (a quorum's member)."""
        listener = self.listener(backend)
        if not isinstance(listener, Listener):
            raise TypeError(f"{backend!r} listens on several servers.")
        return listener

    def _new_listener(self, backend: Backend) -> WakeUps:
        if isinstance(backend, ClusterLockBackend) and backend.sharded_wake_ups():
            return ShardedListener(backend)
        parts = list(backend.listens_on())
        if parts == [backend] and isinstance(backend, LockBackend):
            return Listener(backend)
        return CompositeListener([self.one_listener(part) for part in parts])

    def _once(self, made: dict[K, V], key: K, make: Callable[[K], V]) -> V:
        """``made[key]``, made by ``make(key)`` the first time; the first one made is kept
        whatever the threads. It is made outside the mutex: a cluster client connects as it
        is made, and other aliases must not wait for that."""
        found = made.get(key)
        if found is None:
            new = make(key)
            with self._mutex:
                found = made.setdefault(key, new)
        return found

    def thread_owner(self) -> str:
        """The owner text of a hold taken by the current thread (made again when the thread's
        name changes)."""
        name = threading.current_thread().name
        known = self._owners.get(name)
        if known is None:
            if len(self._owners) >= _OWNERS_LIMIT:  # threads named apart, one per job, say
                self._owners.clear()
            known = self._owners[name] = shorten(f"{self.process} thread {name}", MAX_OWNER_LENGTH)
        return known

    def task_owner(self) -> str:
        """The owner text of a hold taken by the current asyncio task."""
        task = asyncio.current_task()
        where = f"task {task.get_name()}" if task is not None else "event loop"
        return shorten(f"{self.process} {where}", MAX_OWNER_LENGTH)

    def reset(self) -> None:
        """Forget the connections and stop the listeners: the settings changed."""
        with self._mutex:
            for listener in self._listeners.values():
                listener.stop()
            for backend in [*self._quorums.values(), *self._backends.values()]:
                backend.close()
            self._listeners.clear()
            self._backends.clear()
            self._quorums.clear()
            self._looked.clear()
            self._default = None
            self._resets += 1
            self.recent_stats = RecentStats()


def _look_for_eviction(backend: Backend) -> None:
    """Warn (log) if a server of ``backend`` may evict held locks. In a thread of its own, so
    that the first lock call (maybe on an event loop) does not wait for the servers' answers."""

    def look() -> None:
        try:
            warn_if_evicting(backend.servers())
        except Exception:  # the servers could not be listed (a cluster away): nothing to say
            logger.debug("Could not look for eviction on cache %r.", backend.alias, exc_info=True)

    threading.Thread(target=look, name="django_redis_lock-eviction", daemon=True).start()


_runtime = Runtime()


def runtime() -> Runtime:
    """This process's Runtime."""
    return _runtime


def _after_fork_in_child() -> None:
    global _runtime
    _runtime = Runtime()


os.register_at_fork(after_in_child=_after_fork_in_child)


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "REDIS_LOCK":
        lock_settings.forget()
        metrics.reset()
    if setting in ("CACHES", "REDIS_LOCK"):
        _runtime.reset()
