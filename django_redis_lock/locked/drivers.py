"""Who performs the stages of a @locked call: :class:`SyncDriver` in the calling thread,
:class:`AsyncDriver` on the event loop. Which of them runs a callable is decided once, when it
is decorated (:func:`make_driver`, :func:`wrap`); the call's kind (a lock, a rate limit) is
the spec's.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async

from django_redis_lock.locked.calls import Call, Spec, Stage


class _Escaping(BaseException):
    """Carries a StopIteration through the stages: raised in a generator as it is, it would
    come out as a RuntimeError (PEP 479)."""

    def __init__(self, stop: StopIteration) -> None:
        self.stop = stop


class _Flow:
    """A call's stages as a driver runs them: ``stage`` is the next one, None once done."""

    def __init__(self, call: Call) -> None:
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
        """Call ``func`` under its lock or rate; what the call returns or raises."""
        call = self.spec.call(self.spec, args, kwargs)
        flow = _Flow(call)
        while flow.stage is not None:
            try:
                reply = self._perform(flow.stage, call, func)
            except BaseException as exc:
                flow.throw(exc)
            else:
                flow.send(reply)
        return flow.result

    def _perform(self, stage: Stage, call: Call, func: Callable[..., Any]) -> Any:
        match stage:
            case Stage.NAME:
                return self.spec.naming(call.args, call.kwargs)
            case Stage.ACQUIRE:
                return call.acquire()
            case Stage.RUN:
                with call.running():
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
                return call.stats()
            case Stage.RESEND:
                return call.resend(func)


class AsyncDriver:
    """Runs the stages of calls on the event loop; never blocks it."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        # A callable name, or attribute or index access, may touch the database: in a thread.
        self._name_in_thread = sync_to_async(spec.naming) if spec.naming.needs_thread else None

    async def run(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Call and await ``func`` under its lock or rate; what the call returns or raises."""
        call = self.spec.call(self.spec, args, kwargs)
        flow = _Flow(call)
        while flow.stage is not None:
            try:
                reply = await self._perform(flow.stage, call, func)
            except BaseException as exc:  # also when cancelled: the lock is released first
                flow.throw(exc)
            else:
                flow.send(reply)
        return flow.result

    async def _perform(self, stage: Stage, call: Call, func: Callable[..., Any]) -> Any:
        match stage:
            case Stage.NAME:
                if self._name_in_thread is not None:
                    return await self._name_in_thread(call.args, call.kwargs)
                return self.spec.naming(call.args, call.kwargs)
            case Stage.ACQUIRE:
                return await call.aacquire()
            case Stage.RUN:
                # Not awaitable when a sync decorator below answered at once (method_decorator
                # with require_GET on an async view's dispatch returns its 405 as it is).
                with call.running():
                    return await _awaited(call.invoke(func))
            case Stage.ON_BUSY:
                return await _awaited(call.on_busy())
            case Stage.RELEASE:
                await asyncio.shield(call.arelease())  # runs to its end even when cancelled
                return None
            case Stage.STATS:
                return await call.astats()
            case Stage.RESEND:
                return await call.aresend(func)


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
