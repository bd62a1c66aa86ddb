"""Celery tasks of the demo project, locked with @locked."""

from __future__ import annotations

import os

import redis

from django_redis_lock import locked
from testproject.celery import app

# How long a task waits for its gate before giving up.
GATE_SECONDS = 30


@app.task
@locked("report:{report_id}", timeout=10)
def build_report(report_id: int, gate: str) -> str:
    """Say it started (RPUSH ``<gate>:started``), then wait for a push on ``gate``.

    The lock is taken when a worker runs the task, not when it is queued: a second run for
    the same report while one runs fails with LockBusy.
    """
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        client.rpush(f"{gate}:started", report_id)
        if client.blpop([gate], timeout=GATE_SECONDS) is None:
            raise TimeoutError(f"nobody opened the gate {gate!r}")
    finally:
        client.close()
    return f"report {report_id} built"
