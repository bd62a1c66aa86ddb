"""What @locked recognises of other libraries' objects, without importing them unless in use.

Django REST framework's Request, the Celery task running in this thread, and the bound method
that ``method_decorator`` hands to a decorator on every call.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from django.http import HttpRequest
from django.views import View


def request_in(args: tuple[Any, ...]) -> HttpRequest | None:
    """The request of a view call: the first argument, or the second after ``self``.

    Django REST framework's Request wraps an HttpRequest and answers for it.
    """
    for arg in args[:2]:
        if isinstance(arg, HttpRequest) or isinstance(getattr(arg, "_request", None), HttpRequest):
            return cast(HttpRequest, arg)
    return None


def celery_task_id() -> str | None:
    """The id of the Celery task running in this thread, if any."""
    if "celery" not in sys.modules:
        return None
    from celery import current_task

    task = current_task._get_current_object()  # noqa: SLF001  Celery's proxy gives the task itself only this way
    if task is None or task.request.called_directly:
        return None
    return str(task.request.id)


class BoundViewMethod(NamedTuple):
    """A view's ``dispatch`` or handler as ``method_decorator`` hands it over, per call."""

    function: Callable[..., Any]  # the plain function: the same on every call
    view_class: type[View]
    bound: functools.partial[Any]  # its signature (without ``self``) is the one calls use


def bound_view_method(func: Callable[..., Any]) -> BoundViewMethod | None:
    """``func`` as a view's bound method from ``method_decorator``, or None if it is not one.

    method_decorator binds the method in a partial, maybe under other decorators of a list.
    """
    inner = inspect.unwrap(func, stop=lambda f: isinstance(f, functools.partial))
    view = getattr(getattr(inner, "func", None), "__self__", None)
    if not isinstance(inner, functools.partial) or not isinstance(view, View):
        return None
    return BoundViewMethod(getattr(inner.func, "__func__", inner.func), type(view), inner)
