"""@unique: a task enqueued at most once per key until it runs (or has run).

Above Celery's ``@shared_task``/``@app.task`` or Django's ``@task``; the key is a template of
the task's arguments, as ``@locked``'s names are. How the key passes from the enqueue to the
worker: :mod:`django_redis_lock.unique.keys`; per framework: ``celery.py``, ``tasks.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from django_redis_lock.locked.aliases import refuse_unknown_aliases
from django_redis_lock.locked.naming import NameSpec, check_template
from django_redis_lock.unique import celery as celery_tasks
from django_redis_lock.unique import tasks as django_tasks
from django_redis_lock.unique.celery import is_celery_task, unique_celery_task
from django_redis_lock.unique.keys import (
    ON_DUPLICATE,
    QUEUED_TIMEOUT,
    SCOPES,
    UNTIL,
    UniqueSpec,
)
from django_redis_lock.unique.tasks import framework_of, unique_django_task
from django_redis_lock.validation import (
    seconds_to_ms,
    validate_label,
    validate_using,
)

Task = TypeVar("Task")


def unique(
    key: NameSpec,
    *,
    until: str = "executed",
    on_duplicate: str = "return",
    window: float | None = None,
    keep_after_success: float | None = None,
    scope: str = "task",
    timeout: float | None = None,
    using: str | Sequence[str] | None = None,
    label: str | None = None,
) -> Callable[[Task], Task]:
    """Enqueue the decorated task at most once per ``key`` while one is queued or running.

    Put it above the framework's decorator (``@shared_task``, ``@app.task``, Django's
    ``@task``). ``key`` is a constant, a template of the task's arguments
    (``"report:{report_id}"``), or a callable of them, as for ``@locked``; the lock it takes is
    named ``unique:<task name>:<key>`` (``scope="global"``: ``unique:<key>``, shared by every
    task given that key). ``until="executed"`` keeps the key until the task ends (through
    retries), ``"executing"`` until a worker starts it, ``"window"`` ``window`` seconds from
    the enqueue whatever the task does (a throttle). A duplicate enqueue returns the handle
    of the task holding the key (``on_duplicate="return"``: Celery's AsyncResult, Django's
    TaskResult), raises :class:`~django_redis_lock.AlreadyQueued` (``"raise"``), or is sent
    in place of the queued one, which then does not run and reports
    :class:`~django_redis_lock.Skipped` (``"replace"``, a debounce). ``keep_after_success``:
    for that many seconds after a success, a duplicate gets that run instead of a new one.
    ``timeout`` is how long the key lives while the task waits in the queue (None: an hour);
    while the task runs, the watchdog renews it with the lock timeout (REDIS_LOCK["TIMEOUT"]).
    """
    if isinstance(key, str):
        check_template(key)
    elif not callable(key):
        raise TypeError(f"A unique key must be a str or a callable, not {type(key).__name__}.")
    if until not in UNTIL:
        raise ValueError(f"until must be one of {', '.join(map(repr, UNTIL))}, not {until!r}.")
    if on_duplicate not in ON_DUPLICATE:
        choices = ", ".join(map(repr, ON_DUPLICATE))
        raise ValueError(f"on_duplicate must be one of {choices}, not {on_duplicate!r}.")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(map(repr, SCOPES))}, not {scope!r}.")
    window, keep_after_success = _windows(until, on_duplicate, window, keep_after_success)
    queued = QUEUED_TIMEOUT if timeout is None else seconds_to_ms(timeout, "timeout") / 1000
    using = validate_using(using)
    refuse_unknown_aliases(using, "@unique")
    validate_label(label)
    spec = UniqueSpec(
        key, until, on_duplicate, queued, using, label, window, keep_after_success, scope
    )

    def decorate(task: Task) -> Task:
        framework = framework_of(task)
        if framework is not None:
            return unique_django_task(task, spec, framework)  # type: ignore[no-any-return]
        if is_celery_task(task):
            return unique_celery_task(task, spec)  # type: ignore[no-any-return]
        raise TypeError(
            "@unique decorates a task: put it above @shared_task or @app.task (Celery), or "
            f"above @task (Django's tasks), not on {type(task).__name__}."
        )

    return decorate


class UniqueKey(NamedTuple):
    """The key a call of a @unique task takes: its lock's name (``unique:...``) and the cache
    alias (or aliases) that hold it."""

    name: str
    using: str | tuple[str, ...] | None


def key_of(task: Any, *args: Any, **kwargs: Any) -> UniqueKey:
    """The key that enqueueing ``task(*args, **kwargs)`` takes (``task``: a @unique Celery or
    Django task); TypeError for a task @unique did not decorate. Used by the test kit's
    ``assert_enqueued_once()``."""
    found = celery_tasks.unique_of(task) if is_celery_task(task) else django_tasks.unique_of(task)
    if found is None:
        raise TypeError(f"{task!r} is not a @unique task.")
    return UniqueKey(found.name(args, kwargs), found.spec.using)


def _windows(
    until: str, on_duplicate: str, window: object, keep_after_success: object
) -> tuple[float | None, float | None]:
    """``window`` and ``keep_after_success`` in seconds, checked against ``until``."""
    if until == "window":
        if window is None:
            raise ValueError('until="window" needs a window: how many seconds the key lives.')
        if on_duplicate == "replace":
            raise ValueError('on_duplicate="replace" cannot be used with until="window".')
    elif window is not None:
        raise ValueError(f'window is only for until="window", not until={until!r}.')
    if keep_after_success is not None and until != "executed":
        raise ValueError(
            f'keep_after_success needs until="executed" (the key is kept after the task '
            f"succeeded), not until={until!r}."
        )
    return (
        None if window is None else seconds_to_ms(window, "window") / 1000,
        None
        if keep_after_success is None
        else seconds_to_ms(keep_after_success, "keep_after_success") / 1000,
    )
