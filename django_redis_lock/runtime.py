"""What one process keeps for its locks, in one place: connections, listeners, the watchdog.

There is one Runtime per process. A forked child starts with a new, empty one (the parent's
threads do not exist there, and its sockets are not the child's to use), and a change of the
CACHES or REDIS_LOCK setting (``override_settings`` in tests) drops the connections and stops
the listeners, so the next lock call builds them from the new settings. These are the only
fork hook and the only ``setting_changed`` receiver of the package.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_redis_lock.backends import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.waiting import Listener
from django_redis_lock.watchdog import Watchdog

_HOST = socket.gethostname()


class Runtime:
    """This process's connections (one per cache alias), listeners and watchdog."""

    def __init__(self) -> None:
        #: How owners name this process: host and pid.
        self.process = f"{_HOST} pid {os.getpid()}"
        #: Renews the held locks of this process, and settles interrupted attempts.
        self.watchdog = Watchdog()
        self._backends: dict[str, LockBackend] = {}
        self._listeners: dict[LockBackend, Listener] = {}
        self._mutex = threading.Lock()

    def backend(self, alias: str | None = None) -> LockBackend:
        """The connection to the Redis of cache ``alias`` (None: the REDIS_LOCK CACHE)."""
        alias = lock_settings.CACHE if alias is None else alias
        backend = self._backends.get(alias)
        if backend is None:
            with self._mutex:
                backend = self._backends.get(alias)
                if backend is None:
                    backend = self._backends[alias] = LockBackend(alias)
        return backend

    def listener(self, backend: LockBackend) -> Listener:
        """This process's listener for grants on ``backend`` (its thread starts on demand)."""
        listener = self._listeners.get(backend)
        if listener is None:
            with self._mutex:
                listener = self._listeners.get(backend)
                if listener is None:
                    listener = self._listeners[backend] = Listener(backend)
        return listener

    def reset(self) -> None:
        """Forget the connections and stop the listeners: the settings changed."""
        with self._mutex:
            for listener in self._listeners.values():
                listener.stop()
            self._listeners.clear()
            self._backends.clear()


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
    if setting in ("CACHES", "REDIS_LOCK"):
        _runtime.reset()
