"""@locked Celery tasks, run by a real worker process (not eager mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_redis_lock import LockBusy, get_lock_manager
from testproject.redis_server import RedisServer, find_redis_server

celery = pytest.importorskip("celery", reason="Celery is not installed (pip install .[test])")

ROOT = Path(__file__).resolve().parent.parent
WORKER_START_SECONDS = 60
RESULT_SECONDS = 30


@pytest.fixture(scope="module")
def worker(redis_url: str) -> Iterator[None]:
    """A Celery worker (threads pool) on a broker Redis of its own; locks on the test Redis."""
    from testproject.celery import app

    broker = RedisServer(binary=find_redis_server()).start()
    broker_url, backend_url = broker.url, broker.url.replace("/0", "/1")
    previous = app.conf.broker_url, app.conf.result_backend
    app.conf.update(broker_url=broker_url, result_backend=backend_url)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker_url,
        "CELERY_RESULT_BACKEND": backend_url,
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "celery", "-A", "testproject.celery", "worker"]
    command += ["--pool=threads", "--concurrency=4", "--without-gossip", "--without-mingle"]
    command += ["--without-heartbeat", "--loglevel=INFO", "--hostname=locks-test@%h"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + WORKER_START_SECONDS
        while not app.control.ping(timeout=0.5):
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"the Celery worker did not start:\n{output[-3000:]}")
        yield
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        if process.stdout:
            process.stdout.close()
        app.conf.update(broker_url=previous[0], result_backend=previous[1])
        broker.stop()


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
