"""One single-flight fill of a cache key: written once, as a flow of steps, run by a sync and
an async driver (as the Lock's flows are).

The flow, on the read/write lock ``cache_once:<key>`` of the cache alias that holds the value:

1. the cache: a hit is returned (one round trip, no lock);
2. a miss tries the write lock without waiting; the caller that gets it reads the cache again
   (another may have stored the value meanwhile), computes, stores and releases;
3. the others take a read lock, waiting in the queue: the writer's release wakes them all at
   once (no polling); each reads the cache and returns the value, its read hold given back
   right after, off its path (``later.py``);
4. a reader that still misses (the computation raised, or its holder died) waits for the
   write lock, in arrival order: the first computes, those behind it find the value. So a
   failed computation is taken over by one waiter, and each caller computes at most once.

Every hold is released on every path (an exception, a cancellation); the writer's lease is
renewed while it computes, and a crashed writer's ends with its lease.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Generator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import BaseCache, caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock import metrics
from django_redis_lock.cached.later import (
    READ_LEASE,
    arelease_quietly,
    release_later,
    release_quietly,
)
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.shared import SharedLock
from django_redis_lock.scripts.stats import AVOIDED
from django_redis_lock.validation import validate_name, validate_template, validate_using

#: The prefix of the read/write lock that guards the fill of a key.
LOCK_PREFIX = "cache_once:"
#: What a fill's metrics and result say it was: in the cache, computed by this caller, or
#: computed by another while this one waited (a stampede avoided).
HIT, COMPUTED, AVOIDED_OUTCOME = "hit", "computed", "avoided"
#: The label of the fills' holds, shown to operators.
LABEL = "cache_once"
# Told apart from any value the cache may hold, None included.
_MISSING = object()


def validate_cache_timeout(timeout: object) -> Any:
    """The value's ``timeout`` as ``cache.set`` takes it: None (the cache's default timeout,
    as ``cache.set`` without one) or a positive finite number of seconds."""
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(
            f"timeout must be a number of seconds or None, not {type(timeout).__name__}."
        )
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive finite number of seconds, not {timeout!r}.")
    return timeout


def cache_alias(using: object) -> str:
    """The cache alias that keeps both the value and its lock: ``using``, else REDIS_LOCK
    CACHE; a quorum (a list of aliases) is refused, as read/write locks are."""
    given = validate_using(using)
    alias = lock_settings.CACHE if given is None else given
    if not isinstance(alias, str):
        raise ImproperlyConfigured(
            f"cache_once cannot use a quorum of caches ({', '.join(map(str, alias))}): its "
            "value lives in one cache and its read/write lock on that cache's primary. Pass "
            "using=<one alias>."
        )
    return alias


class Fill:
    """One call's fill of ``key``: its cache, its lock (made on a miss), its outcome."""

    def __init__(
        self,
        key: object,
        compute: object,
        timeout: object,
        using: object,
        template: str | None = None,
    ) -> None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}.")
        if not key:
            raise ValueError("key must not be empty.")
        if not callable(compute):
            raise TypeError(f"compute must be callable, not {type(compute).__name__}.")
        self.key = key
        self.compute: Callable[[], Any] = compute
        self.lock_name = validate_name(LOCK_PREFIX + key)
        self.timeout = validate_cache_timeout(timeout)
        self.alias = cache_alias(using)
        self.cache: BaseCache = caches[self.alias]
        #: The key's template: the ``lock`` label of the metrics (None: METRICS_OTHER).
        self.template = validate_template(template)
        self.outcome: str | None = None

    def lock(self, kind: str) -> SharedLock:
        """A holder of the key's read/write lock: ``"r"`` a reader (a short lease: it reads
        the cache once), ``"w"`` the writer (REDIS_LOCK TIMEOUT, renewed while it computes)."""
        reading = kind == "r"
        template = None if self.template is None else LOCK_PREFIX + self.template
        return SharedLock(
            self.lock_name,
            kind,
            using=self.alias,
            label=LABEL,
            timeout=READ_LEASE if reading else None,
            template=template,
            # A reader's hold ends with its lease if the thread giving it back is held up.
            auto_renew=False if reading else None,
        )

    def done(self, outcome: str, value: Any) -> Any:
        self.outcome = outcome
        metrics.cache_once(self.template, outcome)
        return value


# -- the steps a flow yields, each run by the driver ---------------------------------------


class _Get:
    def run(self, fill: Fill) -> Any:
        return fill.cache.get(fill.key, _MISSING)

    async def arun(self, fill: Fill) -> Any:
        return await fill.cache.aget(fill.key, _MISSING)


class _Compute:
    def run(self, fill: Fill) -> Any:
        return fill.compute()

    async def arun(self, fill: Fill) -> Any:
        compute: Callable[[], Any] = fill.compute
        if not inspect.iscoroutinefunction(compute):
            compute = sync_to_async(compute)  # it may use the ORM: not in the event loop
        value = compute()
        return await value if inspect.isawaitable(value) else value


class _Set:
    def __init__(self, value: Any) -> None:
        self.value = value

    def run(self, fill: Fill) -> None:
        fill.cache.set(fill.key, self.value, fill.timeout)

    async def arun(self, fill: Fill) -> None:
        await fill.cache.aset(fill.key, self.value, fill.timeout)


class _Acquire:
    def __init__(self, holder: SharedLock, blocking: bool) -> None:
        self.holder, self.blocking = holder, blocking

    def run(self, fill: Fill) -> bool:
        return self.holder.acquire(blocking=self.blocking)

    async def arun(self, fill: Fill) -> bool:
        return await self.holder.aacquire(blocking=self.blocking)


class _Release:
    """Release a hold, quietly (see ``later.py``); ``later``: off the caller's path."""

    def __init__(self, holder: SharedLock, later: bool = False) -> None:
        self.holder, self.later = holder, later

    def run(self, fill: Fill) -> None:
        if self.later:
            release_later(self.holder)
        else:
            release_quietly(self.holder)

    async def arun(self, fill: Fill) -> None:
        if self.later:
            release_later(self.holder)
        else:
            await arelease_quietly(self.holder)


Step = _Get | _Compute | _Set | _Acquire | _Release
Flow = Generator[Step, Any, Any]


def filling(fill: Fill) -> Flow:
    """The flow of one call (see the module): its value."""
    found = yield _Get()
    if found is not _MISSING:
        return fill.done(HIT, found)
    writer = fill.lock("w")
    if (yield _Acquire(writer, False)):
        return (yield from _computing(fill, writer))
    reader = fill.lock("r")
    yield _Acquire(reader, True)  # woken with the others by the writer's release
    found = _MISSING
    try:
        found = yield _Get()
    finally:
        if found is not _MISSING:  # the value: returned at once, the hold given back after
            reader.tally = AVOIDED  # counted by the release, in its own script
            yield _Release(reader, later=True)
        else:  # at once: this caller may be the writer next
            yield _Release(reader)
    if found is not _MISSING:
        return fill.done(AVOIDED_OUTCOME, found)
    writer = fill.lock("w")  # the computation failed: the first in the queue takes over
    yield _Acquire(writer, True)
    return (yield from _computing(fill, writer))


def _computing(fill: Fill, writer: SharedLock) -> Flow:
    """The writer's part: the cache again (filled since?), else compute and store."""
    try:
        found = yield _Get()
        if found is not _MISSING:
            writer.tally = AVOIDED
            outcome = AVOIDED_OUTCOME
        else:
            found = yield _Compute()
            yield _Set(found)
            outcome = COMPUTED
    finally:
        yield _Release(writer)
    return fill.done(outcome, found)


class _Driven:
    """A flow under way: its next step, or once it ended, its value (or its exception, raised
    out of :meth:`resume`)."""

    def __init__(self, flow: Flow) -> None:
        self.flow, self.going, self.value = flow, True, None
        self.step: Step = _Get()
        self.resume()

    def resume(self, reply: Any = None, error: BaseException | None = None) -> None:
        """Hand the flow the last step's reply, or its error (the flow's ``finally`` releases
        what it holds); keep its next step, or its value."""
        try:
            self.step = self.flow.throw(error) if error is not None else self.flow.send(reply)
        except StopIteration as stop:
            self.going, self.value = False, stop.value

    def run_step(self, fill: Fill) -> None:
        """Run the next step with blocking calls and resume the flow with its outcome."""
        try:
            reply = self.step.run(fill)
        except BaseException as exc:
            self.resume(error=exc)
        else:
            self.resume(reply)


def run(fill: Fill) -> Any:
    """Drive the flow of ``fill`` with blocking calls; RuntimeError in a running event loop,
    which it would block whenever another caller computes (always, not only then)."""
    if asyncio._get_running_loop() is not None:  # noqa: SLF001  asyncio's one way to ask for a running loop without raising
        raise RuntimeError(
            f"cache_once({fill.key!r}) would block the running event loop while another caller "
            "computes: use `await acache_once(...)`, or an async function with @cached_once."
        )
    driven = _Driven(filling(fill))
    while driven.going:
        driven.run_step(fill)
    return driven.value


async def arun(fill: Fill) -> Any:
    """Drive the flow of ``fill`` from async code (a cancellation goes into the flow too)."""
    driven = _Driven(filling(fill))
    while driven.going:
        reply, error = None, None
        try:
            reply = await driven.step.arun(fill)
        except BaseException as exc:
            error = exc
        driven.resume(reply, error)
    return driven.value
