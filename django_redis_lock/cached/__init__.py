"""Single-flight cache fill: on a miss one caller computes the value, the others wait for it
(woken by the release of its lock, not polling) and read what it stored.

``cache_once`` and ``acache_once`` for calls, ``@cached_once`` for functions (sync and async).
The flow: ``fill.py``; the decorator: ``decorator.py``. The value lives in the Django cache
``using`` (None: REDIS_LOCK CACHE), its lock (the read/write lock ``cache_once:<key>``) on
the same cache's Redis.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from django_redis_lock.cached.decorator import cached_once
from django_redis_lock.cached.fill import Fill, arun, run

T = TypeVar("T")


def cache_once(
    key: str,
    compute: Callable[[], T],
    timeout: float | None = None,
    *,
    using: str | None = None,
    template: str | None = None,
) -> T:
    """The value of the cache key ``key``; on a miss, ``compute()``'s, stored with ``timeout``.

    Of the callers that miss at once, one computes and stores the value; the others wait for
    it (woken by the release of its lock) and return the value it stored. When the computation
    raises, its caller gets the error and the first waiter computes in its place (each caller
    computes at most once). ``timeout``: seconds the value lives in the cache; None: the
    cache's default timeout (as ``cache.set`` without one; not "forever"). ``using``: the
    cache alias that keeps the value and its lock (None: REDIS_LOCK CACHE). ``template``: the
    key's template (``"dashboard:{team_id}"``), the ``lock`` label of its metrics (None:
    REDIS_LOCK METRICS_OTHER), as ``lock()``'s.
    """
    fill = Fill(key, compute, timeout, using, template)
    if inspect.iscoroutinefunction(compute):
        raise TypeError("compute is an async function: use `await acache_once(...)`.")
    result: T = run(fill)
    return result


async def acache_once(
    key: str,
    compute: Callable[[], Any],
    timeout: float | None = None,
    *,
    using: str | None = None,
    template: str | None = None,
) -> Any:
    """:func:`cache_once` for async code: ``compute`` may be an async function (awaited) or a
    sync one (run in a thread, as ``sync_to_async`` does: it may use the ORM). Waiting never
    blocks the event loop; a cancelled caller leaves no hold behind."""
    return await arun(Fill(key, compute, timeout, using, template))


__all__ = ["acache_once", "cache_once", "cached_once"]
