"""Celery tasks of the demo project: locked with @locked, rate-limited with @locked(rate=...),
or enqueued once with @unique."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from django_redis_lock import locked, unique
from testproject.celery import app
from testproject.gates import record_run, through_gate


@app.task
@locked("report:{report_id}", timeout=10)
def build_report(report_id: int, gate: str) -> str:
    """Say it started (RPUSH ``<gate>:started``), then wait for a push on ``gate``.

    The lock is taken when a worker runs the task, not when it is queued: a second run for
    the same report while one runs fails with LockBusy.
    """
    through_gate(gate, report_id)
    return f"report {report_id} built"


@unique("report:{report_id}")
@app.task
def rebuild_report(report_id: int, gate: str) -> str:
    """Enqueued at most once per report until it has run (until="executed")."""
    through_gate(gate, report_id)
    return f"report {report_id} rebuilt"


@unique("digest:{user_id}", until="executing", on_duplicate="raise")
@shared_task
def send_digest(user_id: int, gate: str) -> str:
    """Enqueued at most once per user until a worker starts it; a duplicate raises."""
    through_gate(gate, user_id)
    return f"digest {user_id} sent"


@unique("sync:{account}")
@app.task(bind=True, max_retries=1)
def sync_account(self: Any, account: str, gate: str) -> str:
    """Fails its first run and is retried (after the test opens ``<gate>:retry``)."""
    through_gate(gate, f"{account}:{self.request.retries}")
    if self.request.retries == 0:
        raise self.retry(countdown=0.5)
    return f"account {account} synced"


@unique("report:{report_id}", on_duplicate="replace")
@app.task
def debounce_report(report_id: int, gate: str) -> str:
    """The last enqueue per report wins: an earlier one still queued does not run."""
    through_gate(gate, report_id)
    return f"report {report_id} debounced"


@app.task(bind=True, max_retries=0)
@locked("paced-tasks", rate="2/s")
def paced(self: Any, n: int, log: str) -> int:
    """At most two runs a second; over the rate, sent again for its turn (not a retry:
    max_retries=0 does not stop it). Logs ``<n>:<retries>:<time>`` to the list ``log``."""
    record_run(log, f"{n}:{self.request.retries}")
    return n


@app.task(bind=True, max_retries=1)
@locked("retried-tasks", rate="1/s")
def retried(self: Any, n: int, log: str) -> str:
    """One run a second; retries once of its own accord, however often its rate sent it
    again. Logs ``<n>:<retries>:<time>`` to the list ``log``."""
    record_run(log, f"{n}:{self.request.retries}")
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    return f"{n} done"
