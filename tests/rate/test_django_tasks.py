"""@locked(rate=...) Django tasks: django-tasks-db's real db_worker process enqueues a task
over its rate again to run after its wait, never dropping one; the immediate backend, which
cannot defer a task, fails it with RateLimited."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from django_redis_lock import RateLimited
from django_redis_lock.backends.base import text_of
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(
    settings.TASKS_FRAMEWORK is None,
    reason="neither django.tasks (Django 6.0+) nor django-tasks is installed",
)

RESULT_SECONDS = 30


@pytest.fixture
def worker(redis_url: str, tmp_path: Path, transactional_db: None) -> Iterator[Any]:
    pytest.importorskip("django_tasks_db", reason="django-tasks-db is not installed")
    from tests.unique.test_django_tasks import db_worker

    with db_worker(redis_url, tmp_path) as process:
        yield process


def test_the_immediate_backend_fails_a_task_over_its_rate() -> None:
    from testproject.jobs import paced_job

    assert paced_job.enqueue(1, "").return_value == 1
    refused = paced_job.enqueue(2, "")  # the backend cannot defer it: it is not sent again
    assert str(refused.status).endswith("FAILED")
    assert refused.errors[0].exception_class_path == f"{RateLimited.__module__}.RateLimited"


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_tasks_over_their_rate_are_enqueued_again_and_all_run_spaced(
    redis_client: redis.Redis,
) -> None:
    from django_tasks_db.models import DBTaskResult, get_date_max

    from testproject.jobs import apaced_job, paced_job

    for n in range(6):  # sync and async tasks on one rate
        (paced_job if n % 2 else apaced_job).using(backend="db").enqueue(n, "jobs:log")
    wait_until(lambda: redis_client.llen("jobs:log") >= 6, timeout=RESULT_SECONDS, step=0.05)
    logged = [text_of(entry).split(":") for entry in redis_client.lrange("jobs:log", 0, -1)]
    assert sorted(int(n) for n, _ in logged) == list(range(6))  # each ran once, none dropped
    times = sorted(float(at) for _, at in logged)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # 2/s: turns 0.5 s apart by the server's clock (a run logs a little after its turn).
    assert min(gaps) > 0.25, gaps
    assert times[-1] - times[0] >= 2.3
    # Each refused run failed with RateLimited, naming the task enqueued again to run later.
    refused = DBTaskResult.objects.filter(status="FAILED")
    assert refused.exists()
    assert all("sent again as" in row.traceback for row in refused)
    deferred = DBTaskResult.objects.exclude(run_after=get_date_max())
    assert deferred.count() == refused.count()
    assert DBTaskResult.objects.filter(status="SUCCESSFUL").count() == 7  # with the worker's ping
