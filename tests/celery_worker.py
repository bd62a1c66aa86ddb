"""A real Celery worker process for the tests (not eager mode), on a broker of its own."""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testproject.redis_server import RedisServer, find_redis_server
from tests.helpers import stop_process

ROOT = Path(__file__).resolve().parent.parent
# Importing Django and Celery can take long on a loaded machine; a worker that has said it is
# ready answers a ping at once on an idle machine; a loaded one (seen: two test runs beside
# each other) can take seconds to schedule it, so only one silent for READY_SECONDS cannot work.
WORKER_START_SECONDS = 60
READY_SECONDS = 30


@contextlib.contextmanager
def celery_broker() -> Iterator[RedisServer]:
    """The broker Redis of every worker of a test process: one, because the process's Celery
    app keeps the broker and result backend it first connected to."""
    broker = RedisServer(binary=find_redis_server()).start()
    try:
        yield broker
    finally:
        gc.collect()  # Celery < 5.7: results unsubscribe when collected, and need the broker
        broker.stop()


@contextlib.contextmanager
def on_broker(broker: RedisServer) -> Iterator[None]:
    """Point this process's Celery app (and the workers it starts) at ``broker``: before it
    first reads its configuration, which it keeps (even eager mode reads it)."""
    with pytest.MonkeyPatch.context() as patch:
        # Celery reads these variables before its settings (Django's CELERY_* settings win over
        # app.conf.update() in Celery < 5.7); the worker inherits them.
        patch.setenv("CELERY_BROKER_URL", broker.url)
        patch.setenv("CELERY_RESULT_BACKEND", broker.url.replace("/0", "/1"))
        yield


@contextlib.contextmanager
def celery_worker(
    broker: RedisServer, directory: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker (threads pool) of testproject.celery on ``broker``, with ``env`` added to
    its environment (REDIS_URL at least: where its locks and gates are). Fails at once with the
    worker's output when the worker exits, or when it said it is ready but does not answer a
    ping within READY_SECONDS. Yields the worker's process (one process: the threads pool)."""
    from testproject.celery import app

    output = directory / "worker.log"
    command = [sys.executable, "-m", "celery", "-A", "testproject.celery", "worker"]
    command += ["--pool=threads", "--concurrency=4", "--without-gossip", "--without-mingle"]
    command += ["--without-heartbeat", "--loglevel=INFO", "--hostname=locks-test@%h"]
    with on_broker(broker), open(output, "wb") as log:
        full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
        full_env |= {"PYTHONPATH": str(ROOT), **env}
        process = subprocess.Popen(
            command, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_for_worker(app, process, output)
            yield process
        finally:
            stop_process(process)


def _wait_for_worker(app: Any, process: subprocess.Popen[bytes], output: Path) -> None:
    """Return once the worker answers a ping; else fail with its output."""
    started = time.monotonic()
    ready_at = None
    while not app.control.ping(timeout=1.0):
        now = time.monotonic()
        text = output.read_text(errors="replace")
        if ready_at is None and " ready." in text:
            ready_at = now
        if process.poll() is not None:
            problem = f"exited with status {process.returncode}"
        elif ready_at is not None and now - ready_at > READY_SECONDS:
            problem = f"said it is ready but answered no ping within {READY_SECONDS} s"
        elif now - started > WORKER_START_SECONDS:
            problem = f"was not ready within {WORKER_START_SECONDS} s"
        else:
            continue
        pytest.fail(f"the Celery worker {problem}. Its output:\n{text[-3000:]}")
