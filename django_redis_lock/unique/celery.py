"""@unique for Celery tasks: the enqueue (``delay``, ``apply_async``, a signature's, beat's,
a retry's) takes the key; the worker's task signals take it over and free it.

Every way Celery sends a task goes through the registered task's ``apply_async``, so that is
what gets the key: on the task instance of every app, once the app has it (when it is
finalized, or when ``@app.task``'s lazy proxy is evaluated).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import logging
import threading
from contextlib import suppress
from typing import Any

from django_redis_lock.exceptions import Skipped
from django_redis_lock.locked.naming import Naming
from django_redis_lock.unique.enqueue import enqueue_once
from django_redis_lock.unique.keys import TaskKey, UniqueSpec, finished, started

logger = logging.getLogger("django_redis_lock")

# The attribute that marks a task instance whose apply_async takes its key.
_MARK = "_django_redis_lock_unique"
# Keys taken over by tasks running in this process, by task id.
_running: dict[str, TaskKey] = {}
# Starts that must not run, by task id: their run raises it (see _mark).
_skipped: dict[str, Skipped] = {}
_running_lock = threading.Lock()
# Set while a unique task's apply_async sends: the app's send_task it calls is not guarded.
_through: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "django_redis_lock_unique_through", default=False
)
_connected = threading.Lock()
_signals_connected = False


def is_celery_task(target: object) -> bool:
    """Whether ``target`` is a Celery task or one of Celery's proxies of one (without
    evaluating a proxy, nor importing Celery when it is not in use)."""
    import sys

    if "celery" not in sys.modules:
        return False
    from celery.app.task import Task
    from celery.local import Proxy

    return isinstance(target, (Proxy, Task))


def unique_celery_task(task: Any, spec: UniqueSpec) -> Any:
    """Have every app's instance of ``task`` take ``spec``'s key when it is sent; returns
    ``task`` itself (a task, or Celery's proxy of one)."""
    from celery import _state
    from celery.local import PromiseProxy, Proxy

    def mark_in(app: Any) -> None:
        found = _instance_in(task, app)
        if found is not None:
            _mark(found, spec)

    def mark_everywhere(*args: Any, **kwargs: Any) -> None:
        for app in list(_state._get_active_apps()):  # noqa: SLF001  Celery's app registry has no public API for it
            if app.finalized:
                mark_in(app)

    def after_finalize(sender: Any, **kwargs: Any) -> None:
        mark_in(sender)

    def on_finalize(app: Any) -> None:
        app.on_after_finalize.connect(after_finalize, weak=False)

    _connect_signals()
    _state.connect_on_app_finalize(on_finalize)
    if isinstance(task, PromiseProxy):  # @app.task before its app is finalized: when evaluated
        task.__then__(lambda: _mark(task._get_current_object(), spec))  # noqa: SLF001  Celery's proxy gives its object only this way
    elif not isinstance(task, Proxy):
        _mark(task, spec)
    mark_everywhere()
    return task


def _instance_in(task: Any, app: Any) -> Any:
    """``app``'s instance of ``task`` (a task, or a proxy of one), or None if it has none.

    Every app has its own instance of a task: ``@shared_task`` makes one in each, and so does
    ``@app.task`` (shared unless told not to), each found by the task's name and function.
    """
    from celery import _state
    from celery.local import PromiseProxy, Proxy

    if isinstance(task, Proxy) and not isinstance(task, PromiseProxy):
        # @shared_task's proxy is the current app's instance: make it ``app`` for a moment
        # (this thread's current app; the one before is put back).
        before = getattr(_state._tls, "current_app", None)  # noqa: SLF001  Celery's app registry has no public API for it
        _state._set_current_app(app)  # noqa: SLF001  Celery's app registry has no public API for it
        try:
            return task._get_current_object()  # noqa: SLF001  Celery's proxy gives its object only this way
        except KeyError:  # NotRegistered: not a task of this app
            return None
        finally:
            _state._set_current_app(before)  # noqa: SLF001  Celery's app registry has no public API for it
    origin = task._get_current_object() if isinstance(task, Proxy) else task  # noqa: SLF001  Celery's proxy gives its object only this way
    if origin.app is app:
        return origin
    found = app.tasks.get(origin.name)
    return found if found is not None and _function(found) is _function(origin) else None


def _function(task: Any) -> Any:
    """The function a task was made from (None for a Task subclass of its own)."""
    function = getattr(task, "__wrapped__", None)
    return getattr(function, "__func__", function)  # bind=True: a method of the task


class _Unique:
    """What a marked task instance knows: its spec, how it names keys, its send."""

    def __init__(self, task: Any, spec: UniqueSpec, send: Any) -> None:
        self.spec = dataclasses.replace(spec, task=task.name)
        self.send = send
        self.label = spec.shown(spec.label or task.name)
        self._naming: Naming | None = None
        self._task = task

    def name(self, args: Any, kwargs: Any) -> str:
        """The key's lock name for these arguments, as the worker will get them (through the
        task's serializer: a tuple becomes a list, a date a string...)."""
        from kombu import serialization

        dumps: Any = serialization.dumps  # untyped
        loads: Any = serialization.loads
        if self._naming is None:
            signature = inspect.signature(self._task.run)
            self._naming = self.spec.naming(signature, self._task.name)
        content_type, encoding, payload = dumps(
            [list(args or ()), dict(kwargs or {})], serializer=self._task.serializer
        )
        args, kwargs = loads(payload, content_type, encoding)
        return self.spec.key_name(self._task.name, self._naming(tuple(args), kwargs))

    def enqueue(
        self, send: Any, args: Any, kwargs: Any, task_id: str | None, options: dict[str, Any]
    ) -> Any:
        """Send the task through ``send`` (its apply_async before @unique, or the app's
        send_task) once its key is taken, or find the task holding it."""
        from celery.utils import uuid

        # The id is chosen before the send (as Celery would, with its own function), so that
        # the key carries it from the start: a duplicate reads it back at once.
        task_id = task_id or uuid()
        return enqueue_once(
            self.spec,
            self.name(args, kwargs),
            self.label,
            task_id,
            lambda: send(args, kwargs, task_id=task_id, **options),
            lambda result: str(result.id),
            self._task.AsyncResult,
        )


def unique_of(task: Any) -> _Unique | None:
    """What @unique made of the Celery task ``task`` (None: it is not unique)."""
    return getattr(task, _MARK, None)


def _mark(task: Any, spec: UniqueSpec) -> None:
    """Make ``task`` (an instance) take its key in apply_async; once per instance."""
    if getattr(task, _MARK, None) is not None:
        return
    send = task.apply_async
    unique = _Unique(task, spec, send)

    @functools.wraps(send)
    def apply_async(
        args: Any = None, kwargs: Any = None, task_id: str | None = None, **options: Any
    ) -> Any:
        through = _through.set(True)  # its send_task: not guarded again
        try:
            if task_id is not None and task_id in _running:  # a retry of a task running here
                return send(args, kwargs, task_id=task_id, **options)
            return unique.enqueue(send, args, kwargs, task_id, options)
        finally:
            _through.reset(through)

    run = task.run

    @functools.wraps(run)
    def guarded_run(*args: Any, **kwargs: Any) -> Any:
        # A start that must not run (see keys.started) was found so by its prerun signal,
        # which cannot stop the run itself: its run raises Skipped instead, its result then.
        with _running_lock:
            skip = _skipped.pop(task.request.id, None)
        if skip is not None:
            raise skip
        return run(*args, **kwargs)

    setattr(task, _MARK, unique)
    task.apply_async = apply_async
    task.run = guarded_run
    task.throws = (*task.throws, Skipped)  # an expected outcome: logged without a traceback
    _guard_send_task(task.app)


def _guard_send_task(app: Any) -> None:
    """Make ``app.send_task(name, ...)`` take the key of a unique task ``name`` known to
    ``app``: once per app. A task's own apply_async sends through send_task too, its key
    already taken (or a retry's, which keeps it): that send goes straight through."""
    if getattr(app, _MARK, None) is not None:
        return
    send_task = app.send_task

    @functools.wraps(send_task)
    def guarded(
        name: str, args: Any = None, kwargs: Any = None, task_id: str | None = None, **options: Any
    ) -> Any:
        unique: _Unique | None = getattr(app.tasks.get(name), _MARK, None)
        if unique is None or _through.get():
            return send_task(name, args, kwargs, task_id=task_id, **options)

        def send(args: Any, kwargs: Any, **options: Any) -> Any:
            return send_task(name, args, kwargs, **options)

        return unique.enqueue(send, args, kwargs, task_id, options)

    setattr(app, _MARK, True)
    app.send_task = guarded


def _connect_signals() -> None:
    global _signals_connected
    with _connected:
        if _signals_connected:
            return
        from celery import signals

        signals.task_prerun.connect(_prerun, weak=False)
        signals.task_postrun.connect(_postrun, weak=False)
        signals.task_revoked.connect(_revoked, weak=False)
        _signals_connected = True


def _prerun(task_id: str, task: Any, args: Any, kwargs: Any, **extra: Any) -> None:
    unique: _Unique | None = getattr(task, _MARK, None)
    if unique is None:
        return
    try:
        key = started(unique.spec, unique.name(args, kwargs), unique.label, task_id)
    except Skipped as skip:
        with _running_lock:
            _skipped[task_id] = skip
        return
    except Exception:  # Redis down: the task runs; its key ends by its lease
        logger.exception("Unique task %s (%s): its key could not be taken over.", task_id, task)
        return
    if key is not None:
        with _running_lock:
            _running[task_id] = key


def _postrun(task_id: str, task: Any, state: str | None = None, **extra: Any) -> None:
    unique: _Unique | None = getattr(task, _MARK, None)
    if unique is None:
        return
    with _running_lock:
        key = _running.pop(task_id, None)
    try:
        finished(
            key,
            retry=state == "RETRY",
            spec=unique.spec,
            label=unique.label,
            success=state == "SUCCESS",
        )
    except Exception:
        logger.exception("Unique task %s (%s): its key could not be freed.", task_id, task)


def _revoked(request: Any = None, **extra: Any) -> None:
    """A revoked (or expired) task is dropped by the worker: free its key now, rather than at
    the end of its lease; a running one terminated: its postrun does not come."""
    task = extra.get("sender")
    unique: _Unique | None = getattr(task, _MARK, None)
    task_id = getattr(request, "id", None)
    if unique is None or task_id is None:
        return
    with _running_lock:
        key = _running.pop(task_id, None)
    try:
        if key is None:  # still queued: take the key over and free it, as a start would
            name = unique.name(getattr(request, "args", ()), getattr(request, "kwargs", {}))
            with suppress(Skipped):  # another task's key: not this one's to free
                started(dataclasses.replace(unique.spec, until="executing"), name, "", task_id)
        finished(key, retry=False, spec=unique.spec, label=unique.label)
    except Exception:
        logger.exception("Unique task %s (%s): its key could not be freed.", task_id, task)
