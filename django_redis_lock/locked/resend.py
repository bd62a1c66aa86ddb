"""How a task over its rate (``@locked(rate=...)``) is sent again for later, never dropped and
never holding a worker asleep.

A Celery task is sent again with a countdown, keeping its id and its retries count: Celery's
own ``retry()`` would count the resend against ``max_retries``, so the same signature is
built from the request (``signature_from_request``, as ``retry()`` builds it) with the
retries count unchanged, and Celery's ``Retry`` is raised to tell the worker (the task shows
RETRY until it runs). A Django task (``django.tasks``, or the django-tasks backport) is
enqueued again, the same task with the same arguments, to run after the wait: its backend
gives it a new id; a backend that cannot defer a task (the immediate one) gets none.

Only the task that runs the rate-limited callable itself is sent again, not a task that
happens to call it; and not a task run in the caller's process (called directly, eagerly).
Nothing here imports Celery or a tasks framework that the project did not import.
"""

from __future__ import annotations

import contextvars
import datetime
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from django_redis_lock.exceptions import RateLimited

# The tasks frameworks: Django's own first.
_FRAMEWORKS = ("django.tasks", "django_tasks")
_watched: set[str] = set()
_watch_lock = threading.Lock()
# The Django tasks starting or running in this context, innermost last (their TaskResults).
_running: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "django_redis_lock_running_tasks", default=()
)


def resend_task(func: Callable[..., Any], delay: float, limited: RateLimited) -> str | None:
    """Send the task that runs ``func`` again in ``delay`` seconds: a Celery task raises
    Celery's Retry (with ``limited``), a Django task's new id comes back; None when no task
    runs ``func`` that can be sent again."""
    _resend_celery_task(func, delay, limited)
    result = _django_task(func)
    if result is None:
        return None
    return str(_later(result.task, delay).enqueue(*result.args, **result.kwargs).id)


async def aresend_task(func: Callable[..., Any], delay: float) -> str | None:
    """:func:`resend_task` for async code: Django tasks only (Celery runs no coroutines)."""
    result = _django_task(func)
    if result is None:
        return None
    later = _later(result.task, delay)
    return str((await later.aenqueue(*result.args, **result.kwargs)).id)


def _resend_celery_task(func: Callable[..., Any], delay: float, limited: RateLimited) -> None:
    """Raise Celery's Retry once the Celery task running ``func`` in a worker is sent again."""
    if "celery" not in sys.modules:
        return
    from celery import current_task
    from celery.exceptions import Retry

    task = current_task._get_current_object()  # noqa: SLF001  Celery's proxy gives the task itself only this way
    if task is None or not _runs(task.run, func):
        return
    request = task.request
    if request.called_directly or request.is_eager:
        return
    # As Task.retry() builds it, but with the retries count as it was: not a retry.
    signature = task.signature_from_request(request, countdown=delay, retries=request.retries)
    signature.apply_async()
    raise Retry(exc=limited, when=delay, sig=signature)


def _later(task: Any, delay: float) -> Any:
    """``task`` to run ``delay`` seconds from now."""
    return task.using(run_after=timezone.now() + datetime.timedelta(seconds=delay))


def _django_task(func: Callable[..., Any]) -> Any:
    """The TaskResult of the Django task running ``func`` in this context, when its backend
    can defer a task; else None."""
    for result in reversed(_running.get()):
        if _runs(result.task.func, func):
            return result if result.task.get_backend().supports_defer else None
    return None


def _runs(runner: Any, func: Callable[..., Any]) -> bool:
    """Whether ``runner`` (a task's function, maybe a bound method) is ``func`` or a wrapper of
    it (functools.wraps: ``__wrapped__``)."""
    current = getattr(runner, "__func__", runner)
    seen = 0
    while current is not None and seen < 100:  # a __wrapped__ loop must not hang a worker
        if current is func:
            return True
        current, seen = getattr(current, "__wrapped__", None), seen + 1
    return False


def watch_django_tasks() -> None:
    """Follow the Django tasks that start and finish (their signals), in each tasks framework
    imported so far: a @locked(rate=...) function is decorated after its framework's ``task``
    was imported, and a worker imports a task's module before it starts the task."""
    with _watch_lock:
        for framework in _FRAMEWORKS:
            if framework in _watched or framework not in sys.modules:
                continue
            signals = importlib.import_module(f"{framework}.signals")
            signals.task_started.connect(_started, weak=False)
            signals.task_finished.connect(_finished, weak=False)
            _watched.add(framework)


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _running.set((*_running.get(), task_result))


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    # The frameworks may send another TaskResult object for the same task: by id.
    task_id = task_result.id
    _running.set(tuple(result for result in _running.get() if result.id != task_id))
