"""@unique for Django's tasks (``django.tasks`` on Django 6.0+, the ``django-tasks`` backport
before it): ``enqueue``/``aenqueue`` take the key; the task signals take it over and free it.

A task is a frozen dataclass that workers import by its path, so @unique gives back the same
task as an instance of a subclass of its class whose enqueue takes the key: a subclass of its
own, which knows its spec, so that two tasks made from one function keep theirs (``using()``
keeps the subclass; a worker finds the spec from the class of the task it runs). Its
arguments are turned into the key as the queue stores them (JSON).
A backend chooses the task's id as it queues it (no framework API lets the caller give one):
the enqueue holds the key's sending lock until it has written the id into the key, and a
duplicate or a starting worker waits on that lock, woken by its release (see ``enqueue.py``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import logging
import sys
import threading
from typing import Any

from django_redis_lock.exceptions import AlreadyQueued, Skipped
from django_redis_lock.locked.naming import Naming
from django_redis_lock.unique.enqueue import arun, enqueuing, run
from django_redis_lock.unique.keys import TaskKey, UniqueSpec, finished, started

logger = logging.getLogger("django_redis_lock")

# The tasks framework's modules: Django's own first.
_FRAMEWORKS = ("django.tasks", "django_tasks")
_running: dict[str, TaskKey] = {}
_lock = threading.Lock()
_connected: set[str] = set()
# The Skipped of the task about to be called in this context (see _subclass).
_skip: contextvars.ContextVar[Skipped | None] = contextvars.ContextVar(
    "django_redis_lock_unique_skip", default=None
)


def framework_of(target: object) -> str | None:
    """The tasks framework ``target`` is a Task of (its module), or None."""
    for module in _FRAMEWORKS:
        base = sys.modules.get(f"{module}.base")
        if base is not None and isinstance(target, base.Task):
            return module
    return None


class _Unique:
    """What a unique task's class knows of it: its spec, label and how it names its key."""

    def __init__(self, task: Any, spec: UniqueSpec, framework: str) -> None:
        self.spec = dataclasses.replace(spec, task=task.module_path)
        self.label = spec.shown(spec.label or task.module_path)
        self.task_name = task.module_path
        signature = inspect.signature(task.func)
        if task.takes_context:  # the context comes first, and is not an argument queued
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        self.naming = Naming(spec.key, signature, task.module_path)
        self.normalize = _import(framework, "normalize_json")

    def name(self, args: Any, kwargs: Any) -> str:
        key = self.naming(tuple(self.normalize(list(args))), self.normalize(kwargs))
        return self.spec.key_name(self.task_name, key)


def _import(framework: str, name: str) -> Any:
    if framework == "django.tasks":
        from django.utils import json

        return getattr(json, name)
    from django_tasks import utils  # type: ignore[import-not-found,unused-ignore]

    return getattr(utils, name)


# What each unique task is, by its own subclass: a worker finds it from the task it runs.
_uniques: dict[type, _Unique] = {}


def unique_of(task: Any) -> _Unique | None:
    """What @unique made of the Django task ``task`` (None: it is not unique)."""
    return _uniques.get(type(task))


def unique_django_task(task: Any, spec: UniqueSpec, framework: str) -> Any:
    """``task`` as an instance of a unique subclass of its class, its own (see the module)."""
    cls = type(task)
    subclass = _subclass(cls)
    _uniques[subclass] = _Unique(task, spec, framework)
    _connect(framework)
    fields = {f.name: getattr(task, f.name) for f in dataclasses.fields(task) if f.init}
    return subclass(**fields)


def _subclass(cls: Any) -> type:
    """``cls`` whose enqueue and aenqueue take the key first."""

    def flow(task: Any, args: Any, kwargs: Any) -> Any:
        unique = _uniques[type(task)]
        name = unique.name(args, kwargs)
        return enqueuing(unique.spec, name, unique.label, None, _Send(cls, task, args, kwargs))

    def enqueue(self: Any, *args: Any, **kwargs: Any) -> Any:
        return run(flow(self, args, kwargs))

    async def aenqueue(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await arun(flow(self, args, kwargs))

    # A start that must not run (see keys.started) was found so by the task_started signal,
    # which the frameworks send before they call the task: the call raises Skipped instead.
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (skip := _skip.get()) is not None:
            _skip.set(None)
            raise skip
        return cls.call(self, *args, **kwargs)

    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (skip := _skip.get()) is not None:
            _skip.set(None)
            raise skip
        return await cls.acall(self, *args, **kwargs)

    body = {
        "enqueue": enqueue,
        "aenqueue": aenqueue,
        "call": call,
        "acall": acall,
        "__slots__": (),
    }
    return type(f"Unique{cls.__name__}", (cls,), body)


class _Send:
    """How a unique Django task is sent (its class's own enqueue), and found once sent: the
    TaskResult of its backend; AlreadyQueued where the backend keeps none (the immediate and
    dummy backends)."""

    def __init__(self, cls: Any, task: Any, args: Any, kwargs: Any) -> None:
        self.cls, self.task, self.args, self.kwargs = cls, task, args, kwargs

    def send(self) -> Any:
        return self.cls.enqueue(self.task, *self.args, **self.kwargs)

    async def asend(self) -> Any:
        return await self.cls.aenqueue(self.task, *self.args, **self.kwargs)

    def sent_id(self, result: Any) -> str:
        return str(result.id)

    def found(self, task_id: str) -> Any:
        try:
            return self.task.get_result(task_id)
        except NotImplementedError:
            raise AlreadyQueued(f"Task {task_id} holds the key.", task_id) from None

    async def afound(self, task_id: str) -> Any:
        try:
            return await self.task.aget_result(task_id)
        except NotImplementedError:
            raise AlreadyQueued(f"Task {task_id} holds the key.", task_id) from None


def _connect(framework: str) -> None:
    with _lock:
        if framework in _connected:
            return
        signals = sys.modules.get(f"{framework}.signals") or __import__(
            f"{framework}.signals", fromlist=["task_started"]
        )
        signals.task_started.connect(_task_started, weak=False)
        signals.task_finished.connect(_task_finished, weak=False)
        _connected.add(framework)


def _task_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    unique = _uniques.get(type(task_result.task))
    if unique is None:
        return
    task_id = str(task_result.id)
    name = unique.name(task_result.args, task_result.kwargs)
    try:
        key = started(unique.spec, name, unique.label, task_id)
    except Skipped as skip:
        _skip.set(skip)
        return
    except Exception:  # Redis down: the task runs; its key ends by its lease
        logger.exception("Unique task %s: its key could not be taken over.", task_id)
        return
    if key is not None:
        with _lock:
            _running[task_id] = key


def _task_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    unique = _uniques.get(type(task_result.task))
    if unique is None:
        return
    with _lock:
        key = _running.pop(str(task_result.id), None)
    try:
        success = str(getattr(task_result.status, "value", task_result.status)) == "SUCCESSFUL"
        finished(key, retry=False, spec=unique.spec, label=unique.label, success=success)
    except Exception:
        logger.exception("Unique task %s: its key could not be freed.", task_result.id)
