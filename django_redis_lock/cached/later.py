"""Giving back a waiter's read hold off its caller's path.

A waiter that found the value returns it at once; its read hold is released right after by one
daemon thread of the process (for async code too), in the order they came. Only a writer
waits for a read hold, and a writer comes only once the value is missing again: it then waits
a round trip more at most. If the process ends first, the hold's short lease
(:data:`READ_LEASE`) ends it; an ``atexit`` hook gives back those still queued.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading

from django_redis_lock.core.shared import SharedLock
from django_redis_lock.exceptions import LockError

logger = logging.getLogger("django_redis_lock")

#: The lease of a read hold (seconds): it is held for one cache read, then given back.
READ_LEASE = 10.0
# How long the atexit hook waits for the holds still queued to be given back (seconds).
_EXIT_SECONDS = 2.0


def release_quietly(holder: SharedLock) -> None:
    """Release ``holder``; a hold found gone or a Redis error is logged, not raised (the
    value is in the cache either way; the hold's lease ends it)."""
    try:
        holder.release()
    except LockError as exc:
        logger.warning("cache_once: %s", exc)


async def arelease_quietly(holder: SharedLock) -> None:
    """:func:`release_quietly` for async code."""
    try:
        await holder.arelease()
    except LockError as exc:
        logger.warning("cache_once: %s", exc)


class _Releaser:
    """The process's thread that gives read holds back; started on first use, again after a
    fork (the child's queue starts empty: the parent gives back its own holds)."""

    def __init__(self) -> None:
        self._starting = threading.Lock()
        self._pid: int | None = None
        self._queue: queue.SimpleQueue[SharedLock | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, holder: SharedLock) -> None:
        if self._pid != os.getpid():
            self._start()
        self._queue.put(holder)

    def _start(self) -> None:
        with self._starting:
            if self._pid == os.getpid():
                return
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(
                target=self._run, args=(self._queue,), name="django_redis_lock-cache_once",
                daemon=True,
            )  # fmt: skip
            self._thread.start()
            self._pid = os.getpid()

    @staticmethod
    def _run(holds: queue.SimpleQueue[SharedLock | None]) -> None:
        while (holder := holds.get()) is not None:
            try:
                release_quietly(holder)
            except Exception:  # never the end of the thread; the lease ends the hold
                logger.exception("cache_once: giving back a read hold failed.")

    def stop(self) -> None:
        """Give back the holds still queued (at most ``_EXIT_SECONDS``), then end."""
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            self._queue.put(None)
            thread.join(_EXIT_SECONDS)


_releaser = _Releaser()
atexit.register(_releaser.stop)


def release_later(holder: SharedLock) -> None:
    """Give ``holder`` back from the process's releasing thread (from async code too: the
    loop may end, and cancel its tasks, before a task of its own would have run)."""
    _releaser.put(holder)
