"""@unique for Django's tasks (``django.tasks`` on Django 6.0+, the ``django-tasks`` backport
before it): ``enqueue``/``aenqueue`` take the key; the task signals take it over and free it.

A task is a frozen dataclass that workers import by its path, so @unique gives back the same
task as an instance of a subclass of its class whose enqueue takes the key: a subclass of its
own, which knows its spec, so that two tasks made from one function keep theirs (``using()``
keeps the subclass; a worker finds the spec from the class of the task it runs). Its
arguments are turned into the key as the queue stores them (JSON).
A backend chooses the task's id as it queues it: the key says "queued" until the enqueue
writes the id, which a duplicate and a starting worker wait for (a moment).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
import threading
from typing import Any

from django_redis_lock.exceptions import AlreadyQueued
from django_redis_lock.locked.naming import Naming
from django_redis_lock.unique.keys import (
    PREFIX,
    TaskKey,
    UniqueSpec,
    aenqueue_once,
    enqueue_once,
    finished,
    started,
)

logger = logging.getLogger("django_redis_lock")

# The tasks framework's modules: Django's own first.
_FRAMEWORKS = ("django.tasks", "django_tasks")
_running: dict[str, TaskKey] = {}
_lock = threading.Lock()
_connected: set[str] = set()


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
        self.spec = spec
        self.label = spec.label or task.module_path
        signature = inspect.signature(task.func)
        if task.takes_context:  # the context comes first, and is not an argument queued
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        self.naming = Naming(spec.key, signature, task.module_path)
        self.normalize = _import(framework, "normalize_json")

    def name(self, args: Any, kwargs: Any) -> str:
        return PREFIX + self.naming(tuple(self.normalize(list(args))), self.normalize(kwargs))


def _import(framework: str, name: str) -> Any:
    if framework == "django.tasks":
        from django.utils import json

        return getattr(json, name)
    from django_tasks import utils  # type: ignore[import-not-found,unused-ignore]

    return getattr(utils, name)


# What each unique task is, by its own subclass: a worker finds it from the task it runs.
_uniques: dict[type, _Unique] = {}


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

    def enqueue(self: Any, *args: Any, **kwargs: Any) -> Any:
        unique = _uniques[type(self)]
        return enqueue_once(
            unique.spec,
            unique.name(args, kwargs),
            unique.label,
            None,
            lambda: cls.enqueue(self, *args, **kwargs),
            lambda result: str(result.id),
            lambda task_id: _result(self, task_id),
        )

    async def aenqueue(self: Any, *args: Any, **kwargs: Any) -> Any:
        unique = _uniques[type(self)]

        async def send() -> Any:
            return await cls.aenqueue(self, *args, **kwargs)

        async def found(task_id: str) -> Any:
            try:
                return await self.aget_result(task_id)
            except NotImplementedError:
                raise AlreadyQueued(f"Task {task_id} holds the key.", task_id) from None

        name = unique.name(args, kwargs)
        return await aenqueue_once(
            unique.spec, name, unique.label, send, lambda result: str(result.id), found
        )

    body = {"enqueue": enqueue, "aenqueue": aenqueue, "__slots__": ()}
    return type(f"Unique{cls.__name__}", (cls,), body)


def _result(task: Any, task_id: str) -> Any:
    """The TaskResult of the task holding the key; AlreadyQueued where the backend keeps
    none (the immediate and dummy backends)."""
    try:
        return task.get_result(task_id)
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
        finished(key, retry=False, spec=unique.spec, label=unique.label)
    except Exception:
        logger.exception("Unique task %s: its key could not be freed.", task_result.id)
