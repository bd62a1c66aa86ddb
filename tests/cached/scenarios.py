"""What the cache_once tests share: a gated computation, the callers waiting in a key's queue,
a stampede of threads on one key."""

from __future__ import annotations

import threading
from typing import Any

from django_redis_lock import LockStats, cache_once, get_lock_manager
from tests.helpers import server_backend, start, wait_until


def queued(key: str, alias: str = "default") -> int:
    """How many callers of ``cache_once(key)`` wait in its lock's queue."""
    backend = server_backend(alias)
    return int(backend.client.zcard(backend.shared_keys_for(f"cache_once:{key}", "r").queue))


def held_fills(alias: str = "default") -> list[str]:
    """The names of the ``cache_once`` locks anyone holds on cache ``alias``."""
    return [info.name for info in get_lock_manager(alias).list("cache_once:*")]


def settled(alias: str = "default") -> None:
    """Return once no ``cache_once`` lock is held (a waiter's read hold is given back just
    after it returned, by its process's releasing thread): fails if one stays held."""
    wait_until(lambda: held_fills(alias) == [])


def stats_of(key: str, alias: str = "default") -> LockStats:
    found = get_lock_manager(alias).get_stats(f"cache_once:{key}")
    assert found is not None
    return found


class Gated:
    """A computation that waits for ``go`` (bounded), counts its calls, then returns
    ``value`` or raises ``error``."""

    def __init__(self, value: Any = "computed", error: Exception | None = None) -> None:
        self.value, self.error = value, error
        self.calls = 0
        self.started, self.go = threading.Event(), threading.Event()

    def __call__(self) -> Any:
        self.calls += 1
        self.started.set()
        assert self.go.wait(30)
        if self.error is not None:
            raise self.error
        return self.value


def stampede(
    key: str, waiters: int, value: Any = "v", using: str = "default", template: str | None = None
) -> list[Any]:
    """One caller of ``cache_once(key)`` computes (gated) while ``waiters`` others wait in the
    queue; then the gate opens. Every caller's result, once no hold is left."""
    computation = Gated(value)

    def call() -> Any:
        return cache_once(key, computation, 30, using=using, template=template)

    first = start(call)
    assert computation.started.wait(10)
    others = [start(call) for _ in range(waiters)]
    wait_until(lambda: queued(key, using) == waiters)
    computation.go.set()
    results = [future.result(10) for future in [first, *others]]
    assert computation.calls == 1
    settled(using)  # the waiters' holds given back, and so counted
    return results
