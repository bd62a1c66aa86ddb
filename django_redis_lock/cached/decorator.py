"""@cached_once: a function whose result is cached under a key made from its arguments, filled
once however many call it at once on a miss (see ``fill.py``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from django_redis_lock.cached.fill import Fill, arun, cache_alias, run, validate_cache_timeout
from django_redis_lock.locked.naming import NameSpec, Naming

F = TypeVar("F", bound=Callable[..., Any])

#: The ``using`` of every function decorated, for the system check E019 (None: the settings'
#: cache, which must not be a quorum).
DECLARED: list[str | None] = []


def cached_once(
    key_template: NameSpec, timeout: float | None = None, using: str | None = None
) -> Callable[[F], F]:
    """Cache the decorated function's result under ``key_template`` formatted with the call's
    arguments (``"report:{year}:{month}"``, as ``@locked``'s names; or a callable of them
    returning the key), filled by one caller at a time (:func:`cache_once`). Sync and async
    functions. A template naming an argument the function does not take is refused here.
    ``timeout`` and ``using`` as for :func:`cache_once`.
    """
    validate_cache_timeout(timeout)
    if using is not None:  # refused now rather than at the first call; the settings' at a call
        cache_alias(using)
    DECLARED.append(using)

    def decorate(func: F) -> F:
        where = getattr(func, "__qualname__", repr(func))
        naming = Naming(key_template, inspect.signature(func), where)
        template = naming.template

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if naming.needs_thread:  # attributes may reach the database (request.user)
                    key = await sync_to_async(naming)(args, kwargs)
                else:
                    key = naming(args, kwargs)
                compute = functools.partial(func, *args, **kwargs)
                return await arun(Fill(key, compute, timeout, using, template))

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = naming(args, kwargs)
            compute = functools.partial(func, *args, **kwargs)
            return run(Fill(key, compute, timeout, using, template))

        return wrapper  # type: ignore[return-value]

    return decorate
