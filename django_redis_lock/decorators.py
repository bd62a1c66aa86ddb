"""@locked: run a view, a function or a Celery task under a lock.

Views (function-based, class-based, sync and async) answer a busy lock with 423 and a
Retry-After header, an unreachable Redis with 503, and arguments that make an invalid name with
400; plain functions and tasks raise LockBusy, LockUnavailable and ValueError. The lock is
released when the call returns or raises, and for a streaming response when the response is
closed (or dropped unclosed).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views import View

from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockBusy, LockError, LockUnavailable
from django_redis_lock.lock import Lock
from django_redis_lock.manager import get_lock_manager
from django_redis_lock.naming import InvalidName, NameSpec, Naming, check_template
from django_redis_lock.validation import (
    MAX_LABEL_LENGTH,
    seconds_to_ms,
    shorten,
    validate_blocking_timeout,
    validate_label,
    validate_optional_flag,
    validate_using,
)

logger = logging.getLogger("django_redis_lock")

Decorated = TypeVar("Decorated")


@dataclass(frozen=True)
class _Options:
    name: NameSpec
    timeout: float | None
    blocking_timeout: float | None
    auto_renew: bool | None
    on_busy: Callable[..., Any] | None
    label: str | None
    using: str | None


def locked(
    name: NameSpec,
    *,
    timeout: float | None = None,
    blocking_timeout: float | None = 0,
    auto_renew: bool | None = None,
    on_busy: Callable[..., Any] | None = None,
    label: str | None = None,
    using: str | None = None,
) -> Callable[[Decorated], Decorated]:
    """Run the decorated view, function or task only while holding the lock ``name``.

    ``name`` is a constant, a template formatted from the call's bound arguments
    (``"invoice:{invoice_id}"``, ``"user:{request.user.pk}"``; a view's URL kwargs count as
    arguments; :mod:`django_redis_lock.naming` says how values are escaped and which fields are
    refused), or a callable receiving the call's arguments. ``blocking_timeout`` (default 0:
    never tie up a worker) is how long to wait for a busy lock. When it stays busy, views answer
    ``REDIS_LOCK["BUSY_STATUS"]`` (423) with Retry-After, functions and tasks raise LockBusy;
    ``on_busy(*args, **kwargs)`` replaces either and its value is returned. ``label`` (default:
    the callable's dotted name; at most MAX_LABEL_LENGTH) is shown to operators with the request
    path or task id, the whole shortened to MAX_LABEL_LENGTH.
    """
    if isinstance(name, str):
        check_template(name)  # now, also where the arguments are known only per request
    elif not callable(name):
        raise TypeError(f"A lock name must be a str or a callable, not {type(name).__name__}.")
    if timeout is not None:
        seconds_to_ms(timeout, "timeout")
    validate_blocking_timeout(blocking_timeout)
    if on_busy is not None and not callable(on_busy):
        raise TypeError("on_busy must be a callable or None.")
    validate_label(label)
    validate_using(using)
    validate_optional_flag(auto_renew, "auto_renew")
    options = _Options(name, timeout, blocking_timeout, auto_renew, on_busy, label, using)
    # method_decorator decorates on every call: what can be reused is kept here.
    specs: dict[tuple[Any, type], _Spec] = {}

    def decorate(target: Decorated) -> Decorated:
        if isinstance(target, type):
            if issubclass(target, View):
                return _decorate_view_class(target, options)  # type: ignore[return-value]
            raise TypeError("@locked decorates functions and class-based views, not classes.")
        if not callable(target):
            raise TypeError(f"@locked decorates callables, not {type(target).__name__}.")
        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            raise TypeError(
                "@locked cannot decorate a generator function: its body runs after the call "
                "returns, outside the lock. Take the lock inside it with `with lock(...)`."
            )
        spec = _spec_for(target, options, specs)
        if on_busy is not None and iscoroutinefunction(on_busy) and not spec.is_async:
            raise TypeError("An async on_busy needs an async decorated callable.")
        wrap = _wrap_async if spec.is_async else _wrap_sync
        return wrap(target, spec)  # type: ignore[return-value]

    return decorate


@dataclass(frozen=True)
class _Spec:
    """What a @locked callable was decorated with, and how it is called."""

    options: _Options
    naming: Naming
    label: str
    is_async: bool
    signature: inspect.Signature


def _spec_for(
    func: Callable[..., Any], options: _Options, cache: dict[tuple[Any, type], _Spec]
) -> _Spec:
    # method_decorator hands over dispatch (or a handler) bound in a partial, maybe under
    # other decorators; the partial's own signature (without self) is the one calls use.
    inner = inspect.unwrap(func, stop=lambda f: isinstance(f, functools.partial))
    owner = getattr(getattr(inner, "func", None), "__self__", None)
    if isinstance(inner, functools.partial) and isinstance(owner, View):
        key = (getattr(inner.func, "__func__", inner.func), type(owner))
        spec = cache.get(key)
        if spec is None:
            signature = inspect.signature(inner, follow_wrapped=False)
            dotted = f"{type(owner).__module__}.{type(owner).__qualname__}"
            spec = cache[key] = _Spec(
                options,
                Naming(options.name, signature, dotted),
                options.label or dotted,
                is_async=bool(type(owner).view_is_async),
                signature=signature,
            )
        return spec
    signature = inspect.signature(func)
    dotted = f"{func.__module__}.{func.__qualname__}"
    return _Spec(
        options,
        Naming(options.name, signature, dotted),
        options.label or dotted,
        is_async=iscoroutinefunction(func),
        signature=signature,
    )


class _Call:
    """One call of a @locked callable: its lock, and the answers when it cannot be had."""

    def __init__(
        self, spec: _Spec, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.spec, self.args, self.kwargs = spec, args, kwargs
        self.request = _request_in(args)
        options = spec.options
        self.lock: Lock = get_lock_manager(options.using).lock(
            name,
            timeout=options.timeout,
            blocking_timeout=options.blocking_timeout,
            auto_renew=options.auto_renew,
            label=self._label(),
        )

    def _label(self) -> str:
        """The label, with the request or the task; shortened, as a long URL must still run."""
        if self.request is not None:
            label = f"{self.spec.label} {self.request.method} {self.request.path}"
        else:
            task_id = _celery_task_id()
            label = self.spec.label if task_id is None else f"{self.spec.label} task {task_id}"
        return shorten(label, MAX_LABEL_LENGTH)

    def busy(self) -> Any:
        """What the call returns (or raises) when the lock stays busy."""
        name = self.lock.name
        if self.spec.options.on_busy is not None:
            logger.info("Lock %r is busy: %s returns on_busy.", name, self.spec.label)
            return self.spec.options.on_busy(*self.args, **self.kwargs)
        if self.request is None:
            raise LockBusy(f"The lock {name!r} is held by someone else.")
        status = int(lock_settings.BUSY_STATUS)
        logger.info("Lock %r is busy: %s answers %s.", name, self.spec.label, status)
        retry_after = max(1, math.ceil(self.lock.busy_ttl or 0))
        detail = f"This resource is busy; retry in {retry_after} s."
        response = _answer(self.request, status, "locked", detail)
        response["Retry-After"] = str(retry_after)
        return response

    def unavailable(self, exc: LockUnavailable) -> HttpResponseBase | None:
        """None to run unlocked (if so configured), a 503 for views; raises for functions."""
        if self.request is None:
            raise exc
        if lock_settings.RUN_UNLOCKED_IF_UNAVAILABLE:
            logger.warning("Redis is unavailable; %s runs UNLOCKED: %s", self.spec.label, exc)
            return None
        logger.warning("Redis is unavailable; %s answers 503: %s", self.spec.label, exc)
        detail = "The lock service is unavailable; retry later."
        return _answer(self.request, 503, "unavailable", detail)

    def finish(self, result: Any) -> Any:
        """Release now, or when a streaming response is closed; return ``result``."""
        if isinstance(result, HttpResponseBase) and result.streaming:
            _release_on_close(result, self.release)
        else:
            self.release()
        return result

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

    def _log_release_failure(self, exc: LockError) -> None:
        name, label = self.lock.name, self.spec.label
        logger.error("Lock %r could not be released by %s: %s", name, label, exc)

    def holds(self) -> bool:
        """Whether the acquire got as far as taking the lock (it may have been interrupted)."""
        return self.lock.fencing_token is not None


def _invalid_name(spec: _Spec, args: tuple[Any, ...], exc: InvalidName) -> HttpResponse:
    """A view's 400 for a call whose arguments make an invalid name; functions raise ``exc``."""
    request = _request_in(args)
    if request is None:
        raise exc
    logger.info("%s answers 400: its arguments make an invalid lock name: %s", spec.label, exc)
    return _answer(request, 400, "invalid", f"This request makes an invalid lock name: {exc}")


def _wrap_sync(func: Callable[..., Any], spec: _Spec) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            name = spec.naming(args, kwargs)
        except InvalidName as exc:
            return _invalid_name(spec, args, exc)
        call = _Call(spec, name, args, kwargs)
        try:
            acquired = call.lock.acquire()
        except LockUnavailable as exc:
            answer = call.unavailable(exc)
            return answer if answer is not None else func(*args, **kwargs)
        except BaseException:  # interrupted (KeyboardInterrupt, a time limit), maybe holding
            if call.holds():
                call.release()
            raise
        if not acquired:
            return call.busy()
        try:
            result = func(*args, **kwargs)
        except BaseException:
            call.release()
            raise
        if inspect.isawaitable(result):  # an async view this decorator could not tell apart
            call.release()
            getattr(result, "close", lambda: None)()
            raise TypeError(f"{spec.label} returned an awaitable; it cannot run under @locked.")
        return call.finish(result)

    wrapper.__signature__ = spec.signature  # type: ignore[attr-defined]  # Celery reads it
    return wrapper


def _wrap_async(func: Callable[..., Any], spec: _Spec) -> Callable[..., Any]:
    name_in_thread = sync_to_async(spec.naming) if spec.naming.needs_thread else None

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if name_in_thread is not None:
                name = await name_in_thread(args, kwargs)
            else:
                name = spec.naming(args, kwargs)
        except InvalidName as exc:
            return _invalid_name(spec, args, exc)
        call = _Call(spec, name, args, kwargs)
        try:
            acquired = await call.lock.aacquire()
        except LockUnavailable as exc:
            answer = call.unavailable(exc)
            return answer if answer is not None else await func(*args, **kwargs)
        except BaseException:
            if call.holds():
                await asyncio.shield(call.arelease())
            raise
        if not acquired:
            busy = call.busy()
            return await busy if inspect.isawaitable(busy) else busy
        try:
            result = await func(*args, **kwargs)
        except BaseException:
            await asyncio.shield(call.arelease())  # also when the client went away
            raise
        if isinstance(result, HttpResponseBase) and result.streaming:
            return call.finish(result)
        await asyncio.shield(call.arelease())
        return result

    wrapper.__signature__ = spec.signature  # type: ignore[attr-defined]
    return wrapper


def _decorate_view_class(cls: type[View], options: _Options) -> type[View]:
    """Lock ``cls.dispatch``: the name and on_busy get ``self``, ``request`` and URL kwargs.

    Whether a view is async is decided per call, so subclasses may differ from the class.
    """
    dispatch = cls.dispatch

    def sync_dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return dispatch(self, request, *args, **kwargs)

    async def async_dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        # An async view's dispatch returns the handler's coroutine.
        return await cast(Awaitable[Any], dispatch(self, request, *args, **kwargs))

    dotted = f"{cls.__module__}.{cls.__qualname__}"
    signature = inspect.signature(sync_dispatch)
    naming = Naming(options.name, signature, dotted)
    label = options.label or dotted
    locked_sync = _wrap_sync(sync_dispatch, _Spec(options, naming, label, False, signature))
    locked_async = _wrap_async(async_dispatch, _Spec(options, naming, label, True, signature))

    @functools.wraps(dispatch)
    def locked_dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        handler = locked_async if type(self).view_is_async else locked_sync
        return handler(self, request, *args, **kwargs)

    cls.dispatch = locked_dispatch  # type: ignore[method-assign]
    return cls


def _request_in(args: tuple[Any, ...]) -> HttpRequest | None:
    """The request of a view call: the first argument, or the second after ``self``.

    Django REST framework's Request wraps an HttpRequest and answers for it.
    """
    for arg in args[:2]:
        if isinstance(arg, HttpRequest) or isinstance(getattr(arg, "_request", None), HttpRequest):
            return cast(HttpRequest, arg)
    return None


def _celery_task_id() -> str | None:
    """The id of the Celery task running in this thread, if any."""
    if "celery" not in sys.modules:
        return None
    from celery import current_task

    task = current_task._get_current_object()
    if task is None or task.request.called_directly:
        return None
    return str(task.request.id)


def _answer(request: HttpRequest, status: int, error: str, detail: str) -> HttpResponse:
    """A short JSON body for clients that ask for JSON, plain text otherwise."""
    accept = request.headers.get("Accept", "")
    if "json" in accept and "html" not in accept:
        return JsonResponse({"error": error, "detail": detail}, status=status)
    return HttpResponse(detail + "\n", status=status, content_type="text/plain; charset=utf-8")


def _release_on_close(response: HttpResponseBase, release: Callable[[], None]) -> None:
    """Release when the server closes the response (after the last chunk, or a disconnect),
    or when the response is dropped unclosed (a middleware replaced it, say); once."""
    release_once = weakref.finalize(response, _release_off_the_loop, release)
    close, response_ref = type(response).close, weakref.ref(response)

    def close_and_release() -> None:
        try:
            current = response_ref()
            if current is not None:
                close(current)
        finally:
            release_once()

    response.close = close_and_release  # type: ignore[method-assign]


def _release_off_the_loop(release: Callable[[], None]) -> None:
    """Run ``release``; from an event loop's thread (a finalizer may), in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        release()
    else:
        threading.Thread(target=release, name="django_redis_lock-release", daemon=True).start()
