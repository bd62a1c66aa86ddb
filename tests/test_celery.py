"""@locked Celery tasks, run by a real worker process (not eager mode)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from django_redis_lock import LockBusy, get_lock_manager
from testproject.redis_server import RedisServer, find_redis_server

celery = pytest.importorskip("celery", reason="Celery is not installed (pip install .[test])")

ROOT = Path(__file__).resolve().parent.parent
# Importing Django and Celery can take long on a loaded machine; a worker that has said it is
# ready answers a ping at once, so one that does not within READY_SECONDS cannot work.
WORKER_START_SECONDS = 60
READY_SECONDS = 5
RESULT_SECONDS = 30


@pytest.fixture(scope="module")
def worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Celery worker (threads pool) on a broker Redis of its own; locks on the test Redis.

    Fails at once with the worker's output when the worker exits, or when it said it is ready
    but does not answer a ping within READY_SECONDS.
    """
    from testproject.celery import app

    broker = RedisServer(binary=find_redis_server()).start()
    output = tmp_path_factory.mktemp("celery") / "worker.log"
    command = [sys.executable, "-m", "celery", "-A", "testproject.celery", "worker"]
    command += ["--pool=threads", "--concurrency=4", "--without-gossip", "--without-mingle"]
    command += ["--without-heartbeat", "--loglevel=INFO", "--hostname=locks-test@%h"]
    with pytest.MonkeyPatch.context() as patch, open(output, "wb") as log:
        # Celery reads these variables before its settings (Django's CELERY_* settings win over
        # app.conf.update() in Celery < 5.7); the worker inherits them.
        patch.setenv("CELERY_BROKER_URL", broker.url)
        patch.setenv("CELERY_RESULT_BACKEND", broker.url.replace("/0", "/1"))
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
        env |= {"REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_worker(app, process, output)
            yield
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            gc.collect()  # Celery < 5.7: results unsubscribe when collected, and need the broker
            broker.stop()


def _wait_for_worker(app: Any, process: subprocess.Popen[bytes], output: Path) -> None:
    """Return once the worker answers a ping; else fail with its output."""
    started = time.monotonic()
    ready_at = None
    while not app.control.ping(timeout=0.5):
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


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_second_concurrent_run_is_refused_then_succeeds(redis_client: redis.Redis) -> None:
    from testproject.tasks import build_report

    first = build_report.delay(7, "gate:7")
    assert redis_client.blpop(["gate:7:started"], timeout=RESULT_SECONDS)
    info = get_lock_manager().get("report:7")
    assert info is not None
    assert info.label == f"testproject.tasks.build_report task {first.id}"

    second = build_report.delay(7, "gate:7-second")
    with pytest.raises(LockBusy):
        second.get(timeout=RESULT_SECONDS)

    redis_client.rpush("gate:7", "open")
    assert first.get(timeout=RESULT_SECONDS) == "report 7 built"
    assert get_lock_manager().get("report:7") is None

    redis_client.rpush("gate:7-third", "open")  # opened before it runs: it need not wait
    third = build_report.delay(7, "gate:7-third")
    assert third.get(timeout=RESULT_SECONDS) == "report 7 built"


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_lock_is_taken_when_the_task_runs_not_when_it_is_queued(
    redis_client: redis.Redis,
) -> None:
    from testproject.tasks import build_report

    queued = build_report.apply_async((8, "gate:8"), countdown=1)
    assert get_lock_manager().get("report:8") is None  # queued, not running: not locked
    assert redis_client.blpop(["gate:8:started"], timeout=RESULT_SECONDS)
    assert get_lock_manager().get("report:8") is not None
    redis_client.rpush("gate:8", "open")
    assert queued.get(timeout=RESULT_SECONDS) == "report 8 built"


def test_locked_task_keeps_its_signature_for_celery() -> None:
    from testproject.tasks import build_report

    with pytest.raises(TypeError):
        build_report.delay(7)  # Celery checks arguments against the task's signature
