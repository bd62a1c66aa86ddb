"""@locked Celery tasks, run by a real worker process (not eager mode)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from django_redis_lock import LockBusy, get_lock_manager
from testproject.redis_server import RedisServer
from tests.celery_worker import celery_worker

celery = pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")

RESULT_SECONDS = 30


@pytest.fixture(scope="module")
def worker(
    redis_url: str, celery_broker_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A Celery worker process; its locks on the test Redis."""
    directory = tmp_path_factory.mktemp("celery")
    with celery_worker(celery_broker_server, directory, {"REDIS_URL": redis_url}):
        yield


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
