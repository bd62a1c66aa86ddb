"""One call of a @locked callable: its stages written once, run by a sync or an async driver.

:meth:`LockedCall.stages` is the whole flow: make the name, acquire, run the callable, release, and
what to answer or raise when the name is invalid, the lock busy or Redis unavailable. It does
no I/O: it yields each :class:`Stage`, and receives what the stage gave or has the stage's
exception thrown in, the way httpx drives its auth flows. :class:`SyncDriver` and
:class:`AsyncDriver` perform the stages; which of them runs a callable is decided once, when it
is decorated (:func:`make_driver`, :func:`wrap`).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpResponseBase

from django_redis_lock.conf import lock_settings
from django_redis_lock.core.current import holding
from django_redis_lock.core.lock import Lock
from django_redis_lock.core.shared import SharedLock
from django_redis_lock.exceptions import LockBusy, LockError, LockUnavailable
from django_redis_lock.locked import responses
from django_redis_lock.locked.integrations import celery_task_id, request_in
from django_redis_lock.locked.naming import InvalidName, NameSpec, Naming
from django_redis_lock.stats import LockStats
from django_redis_lock.validation import MAX_LABEL_LENGTH, Using, shorten

logger = logging.getLogger("django_redis_lock")


@dataclass(frozen=True)
class Options:
    """The options given to @locked, checked."""

    name: NameSpec
    timeout: float | str | None
    blocking_timeout: float | None
    auto_renew: bool | None
    on_busy: Callable[..., Any] | None
    label: str | None
    using: Using
    #: A semaphore's limit: at most this many calls at once (None: a lock, one call at once).
    limit: int | None = None


@dataclass(frozen=True)
class Spec:
    """What a @locked callable was decorated with, and how it is called."""

    options: Options
    naming: Naming
    label: str
    signature: inspect.Signature


class Stage(enum.Enum):
    """What :meth:`LockedCall.stages` asks its driver to do; the comment says what it sends back."""

    NAME = enum.auto()  # the lock name made from the call's arguments
    ACQUIRE = enum.auto()  # whether the lock was acquired
    RUN = enum.auto()  # what the decorated callable returned
    ON_BUSY = enum.auto()  # what on_busy returned
    RELEASE = enum.auto()  # None: the lock is released (a failure is logged)
    STATS = enum.auto()  # the lock's statistics (None: none, or not readable)


class LockedCall:
    """One call of a @locked callable: its stages, and its answers when it cannot run locked."""

    lock: Lock  # made as soon as the name is known

    def __init__(self, spec: Spec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.spec, self.args, self.kwargs = spec, args, kwargs
        self.request = request_in(args)

    def stages(self) -> Generator[Stage, Any, Any]:
        """The flow of the call, for a driver; returns what the call returns."""
        try:
            name = yield Stage.NAME
        except InvalidName as exc:
            return self._invalid_name(exc)
        try:
            self.lock = self._lock(name)  # a cluster cache connects when first used
        except LockUnavailable as exc:
            answer = self._unavailable(exc)
            return answer if answer is not None else (yield Stage.RUN)
        try:
            acquired = yield Stage.ACQUIRE
        except LockUnavailable as exc:
            answer = self._unavailable(exc)
            return answer if answer is not None else (yield Stage.RUN)
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

    def invoke(self, func: Callable[..., Any]) -> Any:
        """``func`` (the decorated callable) called with the call's arguments."""
        return func(*self.args, **self.kwargs)

    def on_busy(self) -> Any:
        """on_busy called with the call's arguments."""
        on_busy = self.spec.options.on_busy
        assert on_busy is not None  # the stages ask for it only when it was given
        return on_busy(*self.args, **self.kwargs)

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

    def _lock(self, name: str) -> Lock:
        options = self.spec.options
        kept: dict[str, Any] = {  # `using` was checked when the callable was decorated
            "using": options.using,
            "timeout": options.timeout,
            "blocking_timeout": options.blocking_timeout,
            "auto_renew": options.auto_renew,
            "label": self._label(),
            "template": self.spec.naming.template,
        }
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

    def _invalid_name(self, exc: InvalidName) -> HttpResponseBase:
        """A view's 400 for arguments that make an invalid name; functions raise ``exc``."""
        if self.request is None:
            raise exc
        logger.info(
            "%s answers 400: its arguments make an invalid lock name: %s", self.spec.label, exc
        )
        return responses.invalid_name(self.request, exc)

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

    def _unavailable(self, exc: LockUnavailable) -> HttpResponseBase | None:
        """None to run unlocked (if so configured), a 503 for views; raises for functions."""
        if self.request is None:
            raise exc
        if lock_settings.RUN_UNLOCKED_IF_UNAVAILABLE:
            logger.warning("Redis is unavailable; %s runs UNLOCKED: %s", self.spec.label, exc)
            return None
        logger.warning("Redis is unavailable; %s answers 503: %s", self.spec.label, exc)
        return responses.unavailable(self.request)

    def _log_release_failure(self, exc: LockError) -> None:
        name, label = self.lock.name, self.spec.label
        logger.error("Lock %r could not be released by %s: %s", name, label, exc)


class _Escaping(BaseException):
    """Carries a StopIteration through the stages: raised in a generator as it is, it would
    come out as a RuntimeError (PEP 479)."""

    def __init__(self, stop: StopIteration) -> None:
        self.stop = stop


class _Flow:
    """A call's stages as a driver runs them: ``stage`` is the next one, None once done."""

    def __init__(self, call: LockedCall) -> None:
        self._stages = call.stages()
        self.stage: Stage | None = next(self._stages)
        self.result: Any = None

    def send(self, reply: Any) -> None:
        """Go on with what the stage gave."""
        self._resume(lambda: self._stages.send(reply))

    def throw(self, error: BaseException) -> None:
        """Go on with what the stage raised; the stages re-raise what they do not answer."""
        thrown = _Escaping(error) if isinstance(error, StopIteration) else error
        self._resume(lambda: self._stages.throw(thrown))

    def _resume(self, resume: Callable[[], Stage]) -> None:
        stop = None
        try:
            self.stage = resume()
        except StopIteration as done:
            self.stage, self.result = None, done.value
        except _Escaping as escaping:
            stop = escaping.stop
        if stop is not None:
            raise stop  # outside the handler: the caller's own exception, as it was raised


class SyncDriver:
    """Runs the stages of calls in the calling thread."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def run(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """LockedCall ``func`` under its lock; what the call returns or raises."""
        call = LockedCall(self.spec, args, kwargs)
        flow = _Flow(call)
        while flow.stage is not None:
            try:
                reply = self._perform(flow.stage, call, func)
            except BaseException as exc:
                flow.throw(exc)
            else:
                flow.send(reply)
        return flow.result

    def _perform(self, stage: Stage, call: LockedCall, func: Callable[..., Any]) -> Any:
        match stage:
            case Stage.NAME:
                return self.spec.naming(call.args, call.kwargs)
            case Stage.ACQUIRE:
                return call.lock.acquire()
            case Stage.RUN:
                with holding(call.lock):
                    result = call.invoke(func)
                if inspect.isawaitable(result):  # an async view this decorator could not tell
                    getattr(result, "close", lambda: None)()
                    label = self.spec.label
                    raise TypeError(f"{label} returned an awaitable; it cannot run under @locked.")
                return result
            case Stage.ON_BUSY:
                return call.on_busy()
            case Stage.RELEASE:
                call.release()
                return None
            case Stage.STATS:
                try:
                    return call.lock.stats()
                except LockError:  # Redis failed meanwhile: the lease left will do
                    return None


class AsyncDriver:
    """Runs the stages of calls on the event loop; never blocks it."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        # A callable name, or attribute or index access, may touch the database: in a thread.
        self._name_in_thread = sync_to_async(spec.naming) if spec.naming.needs_thread else None

    async def run(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """LockedCall and await ``func`` under its lock; what the call returns or raises."""
        call = LockedCall(self.spec, args, kwargs)
        flow = _Flow(call)
        while flow.stage is not None:
            try:
                reply = await self._perform(flow.stage, call, func)
            except BaseException as exc:  # also when cancelled: the lock is released first
                flow.throw(exc)
            else:
                flow.send(reply)
        return flow.result

    async def _perform(self, stage: Stage, call: LockedCall, func: Callable[..., Any]) -> Any:
        match stage:
            case Stage.NAME:
                if self._name_in_thread is not None:
                    return await self._name_in_thread(call.args, call.kwargs)
                return self.spec.naming(call.args, call.kwargs)
            case Stage.ACQUIRE:
                return await call.lock.aacquire()
            case Stage.RUN:
                # Not awaitable when a sync decorator below answered at once (method_decorator
                # with require_GET on an async view's dispatch returns its 405 as it is).
                with holding(call.lock):
                    return await _awaited(call.invoke(func))
            case Stage.ON_BUSY:
                return await _awaited(call.on_busy())
            case Stage.RELEASE:
                await asyncio.shield(call.arelease())  # runs to its end even when cancelled
                return None
            case Stage.STATS:
                try:
                    return await call.lock.astats()
                except LockError:
                    return None


async def _awaited(value: Any) -> Any:
    """``value``, awaited if it is awaitable."""
    return await value if inspect.isawaitable(value) else value


def make_driver(spec: Spec, is_async: bool) -> SyncDriver | AsyncDriver:
    """The driver of calls of a callable decorated as ``spec`` says: sync or async."""
    return AsyncDriver(spec) if is_async else SyncDriver(spec)


def wrap(func: Callable[..., Any], driver: SyncDriver | AsyncDriver) -> Callable[..., Any]:
    """``func`` run under its lock by ``driver``: a coroutine function for the async driver."""
    if isinstance(driver, AsyncDriver):
        wrapper = _async_wrapper(func, driver)
    else:
        wrapper = _sync_wrapper(func, driver)
    wrapper.__signature__ = driver.spec.signature  # type: ignore[attr-defined]  # Celery reads it
    return wrapper


def _sync_wrapper(func: Callable[..., Any], driver: SyncDriver) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return driver.run(func, args, kwargs)

    return wrapper


def _async_wrapper(func: Callable[..., Any], driver: AsyncDriver) -> Callable[..., Any]:
    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await driver.run(func, args, kwargs)

    return wrapper
