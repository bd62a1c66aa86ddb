"""Django tasks of the demo project (django.tasks, or the django-tasks backport), enqueued once
per key with @unique, or rate-limited with @locked(rate=...); absent when neither is installed
(settings.TASKS_FRAMEWORK is None)."""

from __future__ import annotations

import importlib

from django.conf import settings

from django_redis_lock import locked, unique
from testproject.gates import record_run, through_gate

if settings.TASKS_FRAMEWORK is None:
    raise ImportError("testproject.jobs needs django.tasks or the django-tasks backport")
task = importlib.import_module(settings.TASKS_FRAMEWORK).task


@unique("export:{export_id}")
@task
def export_data(export_id: int, gate: str) -> str:
    """Enqueued at most once per export until it has run."""
    through_gate(gate, export_id)
    return f"export {export_id} done"


@unique("thumbnail:{image}", until="executing", on_duplicate="raise")
@task
def make_thumbnail(image: str, gate: str) -> str:
    """Enqueued at most once per image until a worker starts it; a duplicate raises."""
    through_gate(gate, image)
    return f"thumbnail of {image}"


@unique("ping:{n}")
@task
def ping(n: int) -> int:
    """No gate: done as soon as it runs (the immediate backend runs it as it is enqueued)."""
    return n


@unique("export:{export_id}", on_duplicate="replace")
@task
def debounce_export(export_id: int, gate: str) -> str:
    """The last enqueue per export wins: an earlier one still queued does not run."""
    through_gate(gate, export_id)
    return f"export {export_id} debounced"


@task
@locked("paced-jobs", rate="2/s")
def paced_job(n: int, log: str) -> int:
    """At most two runs a second (with apaced_job); over the rate, enqueued again for its
    turn. Logs ``<n>:<time>`` to the list ``log`` (none when ``log`` is empty)."""
    if log:
        record_run(log, n)
    return n


@task
@locked("paced-jobs", rate="2/s")
async def apaced_job(n: int, log: str) -> int:
    """paced_job, async."""
    if log:
        record_run(log, n)  # a quick call to the test Redis: blocking the loop is harmless here
    return n
