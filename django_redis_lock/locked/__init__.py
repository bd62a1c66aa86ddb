"""@locked: run a view, a function or a Celery task under a lock.

Views (function-based, class-based, sync and async) answer a busy lock with 423 and a
Retry-After header, an unreachable Redis with 503, and arguments that make an invalid name with
400; plain functions and tasks raise LockBusy, LockUnavailable and ValueError. The lock is
released when the call returns or raises, and for a streaming response when the response is
closed (or dropped unclosed). With ``rate=``, the name is a rate limit's instead of a lock's:
:mod:`~django_redis_lock.locked.rated`.

This module checks the options and decides, once per decorated callable, how it is called
(sync or async, a function, a class-based view, a method handed over by ``method_decorator``).
How a name is made: :mod:`~django_redis_lock.locked.naming`; how a call runs:
:mod:`~django_redis_lock.locked.calls` and :mod:`~django_redis_lock.locked.drivers`; the HTTP
answers:
:mod:`~django_redis_lock.locked.responses`; Django REST framework, Celery and
``method_decorator``: :mod:`~django_redis_lock.locked.integrations`.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.views import View

from django_redis_lock.locked.aliases import refuse_unknown_aliases
from django_redis_lock.locked.calls import LockedCall, Options, Spec
from django_redis_lock.locked.drivers import AsyncDriver, SyncDriver, make_driver, wrap
from django_redis_lock.locked.integrations import bound_view_method
from django_redis_lock.locked.naming import ManyNaming, NamesSpec, Naming, check_template
from django_redis_lock.locked.rated import RatedCall
from django_redis_lock.locked.resend import watch_django_tasks
from django_redis_lock.validation import (
    Using,
    validate_blocking_timeout,
    validate_burst,
    validate_label,
    validate_limit,
    validate_names,
    validate_optional_flag,
    validate_rate,
    validate_timeout,
    validate_using,
)

Decorated = TypeVar("Decorated")

#: The ``using`` of every @locked(limit=...) decorated so far (None: REDIS_LOCK["CACHE"]).
SEMAPHORES: list[str | None] = []
#: The ``using`` of every @locked(rate=...) decorated so far (None: REDIS_LOCK["CACHE"]).
RATE_LIMITS: list[str | None] = []

# The arguments Django calls a view's dispatch with: what the class decorator's names read.
_DISPATCH_SIGNATURE = inspect.signature(View.dispatch)


def locked(
    name: NamesSpec,
    *,
    timeout: float | str | None = None,
    blocking_timeout: float | None = 0,
    auto_renew: bool | None = None,
    on_busy: Callable[..., Any] | None = None,
    label: str | None = None,
    using: str | Sequence[str] | None = None,
    limit: int | None = None,
    rate: str | None = None,
    burst: int | None = None,
) -> Callable[[Decorated], Decorated]:
    """Run the decorated view, function or task only while holding the lock ``name``.

    ``name`` is a constant, a template formatted from the call's bound arguments
    (``"invoice:{invoice_id}"``, ``"import:user:{request.user.pk}"``; a view's URL kwargs count as
    arguments; :mod:`django_redis_lock.locked.naming`: how values are escaped, which fields are
    refused), or a callable receiving the call's arguments. ``blocking_timeout`` (default 0:
    never tie up a worker) is how long to wait for a busy lock. When it stays busy, views answer
    ``REDIS_LOCK["BUSY_STATUS"]`` (423) with Retry-After, functions and tasks raise LockBusy;
    ``on_busy(*args, **kwargs)`` replaces either and its value is returned. ``label`` (default:
    the callable's dotted name; at most MAX_LABEL_LENGTH) is shown to operators with the request
    path or task id, the whole shortened to MAX_LABEL_LENGTH. With ``limit``, the name is a
    semaphore's: at most ``limit`` calls run at once (a view answers 423 when all are taken);
    ``limit=1`` is the lock ``name`` itself, so it excludes ``@locked(name)`` and ``lock(name)``.
    A list of names (constants or templates) is taken all or none with
    :func:`~django_redis_lock.lock_many`; ``current_lock()`` is then the MultiLock.

    With ``rate`` ("10/s", "100/m"; ``burst`` as for :func:`~django_redis_lock.rate_limit`),
    the name is a rate limit's: a call runs when it is within the rate (or its turn comes
    within ``blocking_timeout``); else a view answers 429 with Retry-After, a Celery or Django
    task is sent again for then, a function raises RateLimited. Nothing is held, so
    ``timeout``, ``auto_renew``, ``limit`` and ``label`` are refused with it (TypeError).
    """
    if isinstance(name, str):
        check_template(name)  # now, also where the arguments are known only per request
    elif isinstance(name, (list, tuple)):
        _check_names(name, timeout=timeout, limit=limit, rate=rate)
    elif not callable(name):
        raise TypeError(f"A lock name must be a str or a callable, not {type(name).__name__}.")
    if timeout is not None:
        validate_timeout(timeout, "timeout")
    validate_blocking_timeout(blocking_timeout)
    if on_busy is not None and not callable(on_busy):
        raise TypeError("on_busy must be a callable or None.")
    validate_label(label)
    using = validate_using(using)
    refuse_unknown_aliases(using, "@locked")
    validate_optional_flag(auto_renew, "auto_renew")
    if rate is not None:
        _check_rate(
            rate, burst, using, timeout=timeout, auto_renew=auto_renew, limit=limit, label=label
        )
    elif burst is not None:
        raise TypeError('burst= goes with rate=: @locked(name, rate="10/s", burst=5).')
    if limit is not None and validate_limit(limit) == 1:
        limit = None  # one call at once reads as a lock, and is one (a semaphore is apart)
    if limit is not None:
        if isinstance(using, tuple):
            raise ImproperlyConfigured(
                "@locked(limit=...) is a semaphore, which cannot be a quorum lock: give it one "
                "cache alias (using=<alias>)."
            )
        SEMAPHORES.append(using)  # the system checks look at them (a quorum CACHE: E013)
    options = Options(
        name, timeout, blocking_timeout, auto_renew, on_busy, label, using, limit, rate, burst
    )
    # method_decorator decorates on every call: what can be reused is kept here.
    drivers: dict[tuple[Any, type], SyncDriver | AsyncDriver] = {}

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
        driver = _driver_for(target, options, drivers)
        if on_busy is not None and iscoroutinefunction(on_busy) and isinstance(driver, SyncDriver):
            raise TypeError("An async on_busy needs an async decorated callable.")
        return wrap(target, driver)  # type: ignore[return-value]

    return decorate


def _check_names(names: list[str] | tuple[str, ...], **options: Any) -> None:
    """Refuse a list of names that ``lock_many`` could not take, and the options a set does
    not have (a semaphore's limit, a rate, the statistics' timeout)."""
    validate_names(names)  # not empty, no name twice, each a str a lock takes
    for template in names:
        check_template(template)
    given = [key for key in ("limit", "rate") if options[key] is not None]
    if given:
        raise TypeError(f"@locked([...]) takes names together; it takes no {', '.join(given)}.")
    if options["timeout"] == "auto":
        raise ValueError('@locked([...]) takes a timeout in seconds, not "auto".')


def _check_rate(rate: str, burst: int | None, using: Using, **refused: Any) -> None:
    """Refuse what cannot go with ``rate``: the options of a hold, a quorum; record the
    cache the rate limit uses for the system checks (a quorum CACHE: E017)."""
    validate_rate(rate)
    validate_burst(burst)
    given = [name for name, value in refused.items() if value is not None]
    if given:
        raise TypeError(
            f"@locked(rate=...) takes no {', '.join(given)}: a rate limit holds nothing while "
            "the call runs, and shows no label."
        )
    if isinstance(using, tuple):
        raise ImproperlyConfigured(
            "@locked(rate=...) is a rate limit, which cannot be kept on a quorum: give it one "
            "cache alias (using=<alias>)."
        )
    RATE_LIMITS.append(using)
    watch_django_tasks()  # a Django task over its rate is enqueued again


def _spec(options: Options, signature: inspect.Signature, owner: Any) -> Spec:
    """The Spec of a callable called with ``signature``; ``owner`` names it to operators."""
    dotted = f"{owner.__module__}.{owner.__qualname__}"
    naming: Naming | ManyNaming
    if isinstance(options.name, (list, tuple)):
        naming = ManyNaming(options.name, signature, dotted)
    else:
        naming = Naming(options.name, signature, dotted)
    call = LockedCall if options.rate is None else RatedCall
    return Spec(options, naming, options.label or dotted, signature, call)


def _driver_for(
    func: Callable[..., Any],
    options: Options,
    cache: dict[tuple[Any, type], SyncDriver | AsyncDriver],
) -> SyncDriver | AsyncDriver:
    """The driver of ``func``; one per view class for what method_decorator hands over."""
    method = bound_view_method(func)
    if method is None:
        spec = _spec(options, inspect.signature(func), func)
        return make_driver(spec, iscoroutinefunction(func))
    key = (method.function, method.view_class)
    driver = cache.get(key)
    if driver is None:  # the first call from this view class: the template is checked now
        view = method.view_class
        spec = _spec(options, inspect.signature(method.bound, follow_wrapped=False), view)
        driver = cache[key] = make_driver(spec, bool(view.view_is_async))
    return driver


def _decorate_view_class(cls: type[View], options: Options) -> type[View]:
    """Lock ``cls.dispatch``: the name and on_busy get ``self``, ``request`` and URL kwargs.

    Whether a view is async is decided once for each view class that calls it, as a subclass
    may differ from ``cls``.
    """
    dispatch = cls.dispatch
    spec = _spec(options, _DISPATCH_SIGNATURE, cls)
    run_sync, run_async = SyncDriver(spec).run, AsyncDriver(spec).run
    is_async: weakref.WeakKeyDictionary[type[View], bool] = weakref.WeakKeyDictionary()

    @functools.wraps(dispatch)
    def locked_dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        view = type(self)
        view_is_async = is_async.get(view)
        if view_is_async is None:
            view_is_async = is_async[view] = bool(view.view_is_async)
        run = run_async if view_is_async else run_sync  # an async view's dispatch: a coroutine
        return run(dispatch, (self, request, *args), kwargs)

    cls.dispatch = locked_dispatch  # type: ignore[method-assign]
    return cls
