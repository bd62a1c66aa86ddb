"""What is alike in whatever is held like a lock (a Lock, the names of a MultiLock): release
and extend, each handing its flow to a driver, and ``with`` and ``async with``: acquire or
raise LockBusy on entry, release on exit."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Protocol, TypeVar

from django_redis_lock.backends.base import Backend
from django_redis_lock.core.drivers import adrive, drive
from django_redis_lock.core.steps import Flow
from django_redis_lock.exceptions import LockBusy, LockError
from django_redis_lock.validation import wait_options

logger = logging.getLogger("django_redis_lock")

# After a release that handed the lock to a waiter, this thread gives up its core (and its
# process's GIL) once: the new holder, woken by the same reply from Redis, then runs at once
# where it shares them, rather than after this thread's next steps. One system call, only on
# a hand-over; not in async code, where it would hold up the event loop's other tasks.
_let_run: Callable[[], None] = getattr(os, "sched_yield", lambda: None)


class Driven(Protocol):
    """What :class:`Holding`'s release and extend ask of their class: its flows."""

    name: str
    _backend: Backend

    def _releasing(self) -> Flow[bool]: ...

    def _extending(self, additional_time: float | None, replace_ttl: bool) -> Flow[None]: ...


class Takes(Protocol):
    """What :class:`Holding` asks of its class."""

    name: str

    def acquire(self) -> bool: ...

    def release(self) -> None: ...

    async def aacquire(self) -> bool: ...

    async def arelease(self) -> None: ...

    def busy_message(self) -> str: ...


H = TypeVar("H", bound=Takes)


class Holding:
    """Release, extend and the context managers of a Lock and a MultiLock. On a clean exit
    from a block whose hold was lost, the release's LockNotOwned is raised; on an exit with an
    exception, that exception is kept, logged."""

    def release(self: Driven) -> None:
        """Release the lock (every name, for a set); LockNotOwned if this object does not hold
        it."""
        if drive(self._backend, self._releasing(), self.name):
            _let_run()

    async def arelease(self: Driven) -> None:
        """:meth:`release` for async code."""
        await adrive(self._backend, self._releasing(), self.name)

    def extend(
        self: Driven, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """Lengthen the lease by ``additional_time`` seconds (None: the lock's timeout).

        With ``replace_ttl=True`` the lease becomes exactly ``additional_time`` from now. A
        lease never ends more than ``MAX_TIMEOUT`` (one year) from now: a longer sum is capped.
        LockNotOwned if this object does not hold it (any name of a set: the set is lost).
        """
        drive(self._backend, self._extending(additional_time, replace_ttl), self.name)

    async def aextend(
        self: Driven, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """:meth:`extend` for async code."""
        await adrive(self._backend, self._extending(additional_time, replace_ttl), self.name)

    def busy_message(self: Takes) -> str:
        """What LockBusy says when ``with`` finds the lock held by someone else."""
        return f"The lock {self.name!r} is held by someone else."

    def __enter__(self: H) -> H:
        if not self.acquire():
            raise LockBusy(self.busy_message())
        return self

    def __exit__(self: Takes, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.release()
        except LockError:
            _release_failed_on_exit(self, exc_type)

    async def __aenter__(self: H) -> H:
        if not await self.aacquire():
            raise LockBusy(self.busy_message())
        return self

    async def __aexit__(self: Takes, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            await self.arelease()
        except LockError:
            _release_failed_on_exit(self, exc_type)


def _release_failed_on_exit(held: Takes, exc_type: type[BaseException] | None) -> None:
    """A clean exit raises the release's error; one with an exception keeps it, logged."""
    if exc_type is None:
        raise
    logger.warning(
        "Lock %r: release failed while an exception propagated.", held.name, exc_info=True
    )


def blocking_wait(
    what: str,
    blocking: object,
    blocking_timeout: object,
    default_wait: bool,
    default_limit: float | None,
) -> tuple[bool, float | None]:
    """A blocking acquire's wait (see ``wait_options``); RuntimeError when it would block a
    running event loop while it waits (``what``: the call, for the message)."""
    wait, limit = wait_options(blocking, blocking_timeout, default_wait, default_limit)
    if wait and limit != 0 and asyncio._get_running_loop() is not None:  # noqa: SLF001  asyncio's one way to ask for a running loop without raising
        raise RuntimeError(
            f"{what} would block the running event loop while it waits: use "
            "`await ...aacquire()` (or `async with`), or acquire(blocking=False)."
        )
    return wait, limit
