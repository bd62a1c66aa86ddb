"""One call of a @locked callable: its stages written once, performed by a driver.

:meth:`Call.stages` is the whole flow of a call: for a lock (:class:`LockedCall`), make the
name, acquire, run the callable, release, and what to answer or raise when the name is
invalid, the lock busy or Redis unavailable; for a rate limit, :class:`~django_redis_lock.
locked.rated.RatedCall`. The stages do no I/O: they yield each :class:`Stage`, and receive
what the stage gave or have the stage's exception thrown in, the way httpx drives its auth
flows. The drivers (:mod:`~django_redis_lock.locked.drivers`) perform the stages.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponseBase

from django_redis_lock.conf import lock_settings
from django_redis_lock.core.current import holding
from django_redis_lock.core.lock import Lock
from django_redis_lock.core.shared import SharedLock
from django_redis_lock.exceptions import LockBusy, LockError, LockUnavailable
from django_redis_lock.locked import responses
from django_redis_lock.locked.integrations import celery_task_id, request_in
from django_redis_lock.locked.naming import InvalidName, ManyNaming, NamesSpec, Naming
from django_redis_lock.many import MultiLock
from django_redis_lock.stats import LockStats
from django_redis_lock.validation import MAX_LABEL_LENGTH, Using, shorten

logger = logging.getLogger("django_redis_lock")


@dataclass(frozen=True)
class Options:
    """The options given to @locked, checked."""

    name: NamesSpec
    timeout: float | str | None
    blocking_timeout: float | None
    auto_renew: bool | None
    on_busy: Callable[..., Any] | None
    label: str | None
    using: Using
    #: A semaphore's limit: at most this many calls at once (None: a lock, one call at once).
    limit: int | None = None
    #: A rate limit's rate ("10/s") and burst: the callable is rate-limited, not locked.
    rate: str | None = None
    burst: int | None = None


@dataclass(frozen=True)
class Spec:
    """What a @locked callable was decorated with, and how it is called."""

    options: Options
    naming: Naming | ManyNaming
    label: str
    signature: inspect.Signature
    #: What a call is: a LockedCall, or a RatedCall for a rate limit.
    call: type[Call]


class Stage(enum.Enum):
    """What :meth:`LockedCall.stages` asks its driver to do; the comment says what it sends back."""

    NAME = enum.auto()  # the lock name made from the call's arguments
    ACQUIRE = enum.auto()  # whether the lock was acquired
    RUN = enum.auto()  # what the decorated callable returned
    ON_BUSY = enum.auto()  # what on_busy returned
    RELEASE = enum.auto()  # None: the lock is released (a failure is logged)
    STATS = enum.auto()  # the lock's statistics (None: none, or not readable)
    RESEND = enum.auto()  # the id of the task sent again (None: no task to send again)


class Call:
    """One call of a @locked callable: what every kind shares; what a driver performs.

    The default stages do nothing: a kind of call has only those it yields.
    """

    def __init__(self, spec: Spec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.spec, self.args, self.kwargs = spec, args, kwargs
        self.request = request_in(args)

    def stages(self) -> Generator[Stage, Any, Any]:
        """The flow of the call, for a driver; returns what the call returns."""
        try:
            name = yield Stage.NAME
        except InvalidName as exc:
            return self.invalid_name(exc)
        return (yield from self.named(name))

    def named(self, name: str | tuple[str, ...]) -> Generator[Stage, Any, Any]:
        """The flow of the call once its name (or names, for a set) is made."""
        raise NotImplementedError

    def invoke(self, func: Callable[..., Any]) -> Any:
        """``func`` (the decorated callable) called with the call's arguments."""
        return func(*self.args, **self.kwargs)

    def on_busy(self) -> Any:
        """on_busy called with the call's arguments."""
        on_busy = self.spec.options.on_busy
        assert on_busy is not None  # the stages ask for it only when it was given
        return on_busy(*self.args, **self.kwargs)

    def acquire(self) -> Any:
        """What the ACQUIRE stage sends back."""
        raise NotImplementedError

    async def aacquire(self) -> Any:
        """:meth:`acquire` for async code."""
        raise NotImplementedError

    def running(self) -> AbstractContextManager[Any]:
        """What the callable runs in (the current hold of a lock)."""
        return contextlib.nullcontext()

    def release(self) -> None:
        """Give back what was acquired, logging instead of raising."""

    async def arelease(self) -> None:
        """:meth:`release` for async code."""

    def stats(self) -> LockStats | None:
        """Statistics that tell a client when to retry (None: none)."""
        return None

    async def astats(self) -> LockStats | None:
        """:meth:`stats` for async code."""
        return None

    def resend(self, func: Callable[..., Any]) -> str | None:
        """The id of the task running ``func``, sent again for later (None: none runs it)."""
        return None

    async def aresend(self, func: Callable[..., Any]) -> str | None:
        """:meth:`resend` for async code."""
        return None

    def invalid_name(self, exc: InvalidName) -> HttpResponseBase:
        """A view's 400 for arguments that make an invalid name; functions raise ``exc``."""
        if self.request is None:
            raise exc
        logger.info(
            "%s answers 400: its arguments make an invalid lock name: %s", self.spec.label, exc
        )
        return responses.invalid_name(self.request, exc)

    def unavailable(self, exc: LockUnavailable) -> Generator[Stage, Any, Any]:
        """The stages when Redis is unavailable: a view runs unprotected (if so configured) or
        answers 503; functions raise ``exc``. Yielded from: ``return (yield from ...)``."""
        if self.request is None:
            raise exc
        if lock_settings.RUN_UNLOCKED_IF_UNAVAILABLE:
            logger.warning("Redis is unavailable; %s runs UNLOCKED: %s", self.spec.label, exc)
            return (yield Stage.RUN)
        logger.warning("Redis is unavailable; %s answers 503: %s", self.spec.label, exc)
        return responses.unavailable(self.request)


class LockedCall(Call):
    """One call of a @locked callable under its lock (or a semaphore's place)."""

    lock: Lock | MultiLock  # made as soon as the name is known

    def named(self, name: str | tuple[str, ...]) -> Generator[Stage, Any, Any]:
        """Acquire, run, release; the answers when busy or unavailable."""
        try:
            self.lock = self._lock(name)  # a cluster cache connects when first used
        except LockUnavailable as exc:
            return (yield from self.unavailable(exc))
        try:
            acquired = yield Stage.ACQUIRE
        except LockUnavailable as exc:
            return (yield from self.unavailable(exc))
        except BaseException:  # interrupted (KeyboardInterrupt, a time limit), maybe holding
            if self.lock.fencing_token is not None:
                yield Stage.RELEASE
            raise
        if not acquired:
            if self.spec.options.on_busy is None:
                # A view tells when to retry: the holder's typical remaining hold if known.
                stats = None
                if self.request is not None and lock_settings.stats:
                    stats = yield Stage.STATS
                return self._busy(stats)
            logger.info("Lock %r is busy: %s returns on_busy.", self.lock.name, self.spec.label)
            return (yield Stage.ON_BUSY)
        try:
            result = yield Stage.RUN
        except BaseException:
            yield Stage.RELEASE  # also when the client went away
            raise
        if responses.is_streaming(result):
            responses.release_on_close(result, self.release)
        else:
            yield Stage.RELEASE
        return result

    def acquire(self) -> bool:
        """Whether the lock was acquired."""
        return self.lock.acquire()

    async def aacquire(self) -> bool:
        """:meth:`acquire` for async code."""
        return await self.lock.aacquire()

    def running(self) -> AbstractContextManager[Any]:
        """The lock is the current hold while the callable runs."""
        return holding(self.lock)

    def stats(self) -> LockStats | None:
        """The lock's statistics; None when Redis failed meanwhile (the lease left will do),
        or for a set of names (whose statistics are each name's)."""
        if isinstance(self.lock, MultiLock):
            return None
        try:
            return self.lock.stats()
        except LockError:
            return None

    async def astats(self) -> LockStats | None:
        """:meth:`stats` for async code."""
        if isinstance(self.lock, MultiLock):
            return None
        try:
            return await self.lock.astats()
        except LockError:
            return None

    def release(self) -> None:
        """Release, logging instead of raising: the work is done, the caller gets its result."""
        try:
            self.lock.release()
        except LockError as exc:
            self._log_release_failure(exc)

    async def arelease(self) -> None:
        """:meth:`release` for async code."""
        try:
            await self.lock.arelease()
        except LockError as exc:
            self._log_release_failure(exc)

    def _lock(self, name: str | tuple[str, ...]) -> Lock | MultiLock:
        options = self.spec.options
        kept: dict[str, Any] = {  # `using` was checked when the callable was decorated
            "using": options.using,
            "timeout": options.timeout,
            "blocking_timeout": options.blocking_timeout,
            "auto_renew": options.auto_renew,
            "label": self._label(),
        }
        if isinstance(name, tuple):
            return MultiLock(name, **kept)
        kept["template"] = self.spec.naming.template
        if options.limit is not None:
            return SharedLock(name, "s", options.limit, **kept)
        return Lock(name, **kept)

    def _label(self) -> str:
        """The label, with the request or the task; shortened, as a long URL must still run."""
        if self.request is not None:
            label = f"{self.spec.label} {self.request.method} {self.request.path}"
        else:
            task_id = celery_task_id()
            label = self.spec.label if task_id is None else f"{self.spec.label} task {task_id}"
        return shorten(label, MAX_LABEL_LENGTH)

    def _busy(self, stats: LockStats | None = None) -> HttpResponseBase:
        """A view's answer to a busy lock; functions raise LockBusy.

        Retry-After is the holder's typical remaining hold when the lock's statistics know
        it (how long holds that lasted as long as this one so far went on), else the lease
        left, which auto-renewal keeps near the whole timeout.
        """
        name = self.lock.name
        if self.request is None:
            raise LockBusy(f"The lock {name!r} is held by someone else.")
        status = int(lock_settings.BUSY_STATUS)
        logger.info("Lock %r is busy: %s answers %s.", name, self.spec.label, status)
        retry, held = self.lock.busy_ttl, self.lock.busy_held
        if stats is not None and held is not None:
            remaining = stats.expected_remaining(held)
            if remaining is not None:
                retry = remaining if retry is None else min(retry, remaining)
        return responses.busy(self.request, status, retry)

    def _log_release_failure(self, exc: LockError) -> None:
        name, label = self.lock.name, self.spec.label
        logger.error("Lock %r could not be released by %s: %s", name, label, exc)
