"""The Celery app of the unique-task scenarios (faults/unique.py): three @unique tasks, one per
mode, that record every start and end in Redis.

    celery -A faults.unique_app worker --pool=solo ...

Run by the controller with DJANGO_SETTINGS_MODULE=faults.settings, FAULTS_SETTINGS (the
cache), FAULTS_BROKER (the broker's URL) and FAULTS_RECORDS (the Redis the records go to).
The tasks are ``acks_late``: a worker killed before it acknowledged a task has it delivered
again (the broker's visibility timeout is short). Each record is one JSON list in the list
RECORDS: ``[kind, monotonic time, pid, task id, task, key, extra]``; the kinds:

- ``prerun``: a worker starts a task, before the package decides whether it runs (this hook
  is connected before the tasks are decorated, so Celery calls it first); extra: whether
  the broker said the message was delivered again;
- ``run`` and ``end``: the task's body starts and ends (it works WORK seconds between);
- ``post``: the task is over (after the package's own hook freed or kept its key); extra:
  ``"ran"``, ``"skipped"`` (the package's Skipped) or the state;
- ``suicide``: the worker SIGKILLs itself right after ``post`` of a task sent with
  ``kill=True``, before Celery acknowledges it (the redelivery case);
- ``ready``: a worker is ready to take tasks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "faults.settings")

import django

django.setup()

import redis  # noqa: E402
from celery import Celery, signals  # noqa: E402

from django_redis_lock import Skipped, unique  # noqa: E402

RECORDS = "faults:unique:records"
WORK = 0.05  # seconds of work in a task's body
WINDOW = 1.0  # the throttle's window
QUEUED = 20.0  # the lease of a queued task's key
# The broker gives a task no worker acknowledged to another worker this long after it was
# delivered, looking every second: short, so that the redeliveries happen within a run.
VISIBILITY = 3

app = Celery("faults_unique")
app.conf.update(
    broker_url=os.environ.get("FAULTS_BROKER", "redis://127.0.0.1:6399/1"),
    broker_transport_options={
        "visibility_timeout": VISIBILITY,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
_records = redis.Redis.from_url(os.environ.get("FAULTS_RECORDS", "redis://127.0.0.1:6399/2"))


def record(
    kind: str,
    task_id: str = "",
    task: str = "",
    key: str = "",
    extra: Any = None,
    at: float | None = None,
) -> None:
    """Append one record (see the module), of now or of the time ``at``."""
    now = time.monotonic() if at is None else at
    line = [kind, now, os.getpid(), task_id, task, key, extra]
    _records.rpush(RECORDS, json.dumps(line))


def _key_of(args: Any, kwargs: Any) -> str:
    return str((kwargs or {}).get("key", (args or [""])[0]))


@signals.task_prerun.connect(weak=False)  # type: ignore[untyped-decorator]
def _prerun(task_id: str, task: Any, args: Any, kwargs: Any, **extra: Any) -> None:
    delivery = getattr(task.request, "delivery_info", None) or {}
    record("prerun", task_id, task.name, _key_of(args, kwargs), bool(delivery.get("redelivered")))


@signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
def _ready(**extra: Any) -> None:
    record("ready")


def _body(task: str, key: str, task_id: str) -> None:
    record("run", task_id, task, key)
    time.sleep(WORK)  # the work that must not run twice at once for one key
    record("end", task_id, task, key)


@unique("k:{key}", timeout=QUEUED)
@app.task(bind=True, name="unique.default")  # type: ignore[untyped-decorator]
def default(self: Any, key: str, kill: bool = False) -> None:
    """until="executed", on_duplicate="return"."""
    _body(self.name, key, self.request.id)


@unique("k:{key}", on_duplicate="replace", timeout=QUEUED)
@app.task(bind=True, name="unique.replace")  # type: ignore[untyped-decorator]
def replace(self: Any, key: str, kill: bool = False) -> None:
    """A debounce: the last enqueue wins."""
    _body(self.name, key, self.request.id)


@unique("k:{key}", until="window", window=WINDOW)
@app.task(bind=True, name="unique.window")  # type: ignore[untyped-decorator]
def window(self: Any, key: str, kill: bool = False) -> None:
    """A throttle: one task per key and window."""
    _body(self.name, key, self.request.id)


TASKS = {"default": default, "replace": replace, "window": window}


# Connected after the tasks were decorated: Celery calls it after the package's own hook.
@signals.task_postrun.connect(weak=False)  # type: ignore[untyped-decorator]
def _postrun(
    task_id: str, task: Any, args: Any, kwargs: Any, retval: Any = None, state: Any = None, **_: Any
) -> None:
    outcome = "skipped" if isinstance(retval, Skipped) else "ran" if state == "SUCCESS" else state
    record("post", task_id, task.name, _key_of(args, kwargs), outcome)
    # Once per task: its redelivery carries kill=True too, and killing at every delivery
    # would redeliver it for ever (the queue would never drain).
    if (
        (kwargs or {}).get("kill")
        and outcome == "ran"
        and _records.set(f"faults:unique:killed:{task_id}", 1, nx=True, ex=3600)
    ):
        record("suicide", task_id, task.name, _key_of(args, kwargs))
        os.kill(os.getpid(), signal.SIGKILL)  # ran, its key freed, not yet acknowledged
