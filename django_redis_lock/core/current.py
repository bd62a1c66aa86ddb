"""The hold of the ``@locked`` code that runs now, reachable without passing the lock around.

A context variable: each thread, each asyncio task and each ``sync_to_async`` call sees its
own, so two requests never see each other's hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django_redis_lock.core.lock import Lock
from django_redis_lock.many.multi import MultiLock

_current: ContextVar[Lock | MultiLock | None] = ContextVar(
    "django_redis_lock_current", default=None
)


def current_lock() -> Lock | MultiLock | None:
    """The Lock held for the innermost ``@locked`` function running now (a semaphore's
    place for ``@locked(limit=...)``, the MultiLock of ``@locked([...])``); None outside
    ``@locked`` code.

    Fence a write with it: ``fenced_update(queryset, current_lock(), ...)``; a None is
    refused there. Set while the decorated function runs, not while a streaming response it
    returned is sent.
    """
    return _current.get()


@contextmanager
def holding(lock: Lock | MultiLock) -> Iterator[None]:
    """``lock`` is the current hold inside the block."""
    token = _current.set(lock)
    try:
        yield
    finally:
        _current.reset(token)
