"""@unique Django tasks: the immediate backend in this process, and django-tasks-db's real
db_worker process on the test database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection, connections

from django_redis_lock import AlreadyQueued, get_lock_manager
from tests.helpers import (
    fork_child,
    forks_to_share_its_setup,
    gate_started,
    label_of,
    stop_process,
    wait_children,
    wait_until,
)

pytestmark = pytest.mark.skipif(
    settings.TASKS_FRAMEWORK is None,
    reason="neither django.tasks (Django 6.0+) nor django-tasks is installed",
)

ROOT = Path(__file__).resolve().parents[2]
RESULT_SECONDS = 30
RUNNING_LEASE = 2


def _finished(result: Any) -> Any:
    """``result`` refreshed until its task ended; its return value."""

    def done() -> bool:
        result.refresh()
        return result.is_finished  # type: ignore[no-any-return]

    wait_until(done, timeout=RESULT_SECONDS, step=0.05)
    return result.return_value


# -- the immediate backend: the task runs as it is enqueued -----------------------------------


def test_the_immediate_backend_runs_the_task_and_frees_the_key() -> None:
    from testproject.jobs import ping

    assert ping.enqueue(3).return_value == 3
    assert get_lock_manager().get("unique:testproject.jobs.ping:ping:3") is None


def test_the_immediate_backend_refuses_a_duplicate_while_the_task_runs(
    redis_client: redis.Redis,
) -> None:
    from testproject.jobs import export_data

    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(export_data.enqueue(1, "gate:i1")))
    first.start()
    try:
        assert gate_started(redis_client, "gate:i1") == "1"
        label = label_of("unique:testproject.jobs.export_data:export:1")
        assert label.startswith("testproject.jobs.export_data running as ")
        # The immediate backend keeps no results: even on_duplicate="return" can only refuse.
        with pytest.raises(AlreadyQueued) as refused:
            export_data.enqueue(1, "gate:i1-dup")
        assert refused.value.task_id == label.rpartition(" ")[2]
    finally:
        redis_client.rpush("gate:i1", "open")
        first.join(RESULT_SECONDS)
    assert results[0].return_value == "export 1 done"
    assert get_lock_manager().get("unique:testproject.jobs.export_data:export:1") is None
    assert redis_client.llen("gate:i1-dup:started") == 0


def test_two_unique_tasks_of_one_function_keep_their_own_spec(redis_client: redis.Redis) -> None:
    from django_redis_lock import unique
    from testproject import jobs
    from testproject.gates import through_gate

    by_gate = unique("gate:{gate}")(jobs.task(through_gate))
    by_value = unique("value:{value}", until="executing")(jobs.task(through_gate))
    for task, value in ((by_gate, 1), (by_value, 2)):
        running = threading.Thread(target=task.enqueue, args=(f"gate:o{value}", value))
        running.start()
        try:
            assert gate_started(redis_client, f"gate:o{value}") == str(value)
            held = [info.name for info in get_lock_manager().list("unique:*")]
            # by_gate keeps its key while it runs; by_value's was freed as it started.
            assert held == (
                ["unique:testproject.gates.through_gate:gate:gate:o1"] if task is by_gate else []
            )
        finally:
            redis_client.rpush(f"gate:o{value}", "open")
            running.join(RESULT_SECONDS)
    assert list(get_lock_manager().list("unique:*")) == []


# -- django-tasks-db's db_worker ---------------------------------------------------------------


@contextlib.contextmanager
def db_worker(
    redis_url: str, directory: Path, extra: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """django-tasks-db's worker process on the test database, its locks on the test Redis
    (``extra``: more environment, another topology's); returns once it ran a first task."""
    from testproject.jobs import ping

    connections.close_all()  # the worker writes the same SQLite file
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": redis_url,
        "TESTPROJECT_DB": str(connection.settings_dict["NAME"]),
        "TESTPROJECT_REDIS_LOCK": json.dumps({"TIMEOUT": RUNNING_LEASE}),
        **(extra or {}),
    }
    command = [sys.executable, "manage.py", "db_worker", "--backend", "db", "--interval", "0.05"]
    command += ["--no-startup-delay", "--no-reload"]  # one process: what the test kills
    with open(directory / "db_worker.log", "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        ready = ping.using(backend="db").enqueue(0)
        try:
            assert _finished(ready) == 0
        except AssertionError:
            output = (directory / "db_worker.log").read_text(errors="replace")
            pytest.fail(f"the db_worker did not run a task:\n{output[-3000:]}")
        yield process
    finally:
        stop_process(process)


@pytest.fixture
def worker(redis_url: str, tmp_path: Path, transactional_db: None) -> Iterator[Any]:
    pytest.importorskip("django_tasks_db", reason="django-tasks-db is not installed")
    with db_worker(redis_url, tmp_path) as process:
        yield process


def test_a_duplicate_gets_the_task_already_queued_then_running(
    worker: Any, redis_client: redis.Redis
) -> None:
    from testproject.jobs import export_data

    on_db = export_data.using(backend="db")
    first = on_db.enqueue(2, "gate:w2")
    assert on_db.enqueue(2, "gate:w2-dup").id == first.id
    assert gate_started(redis_client, "gate:w2") == "2"
    wait_until(
        lambda: (
            f"running as {first.id}" in label_of("unique:testproject.jobs.export_data:export:2")
        ),
        timeout=5,
    )
    assert on_db.enqueue(2, "gate:w2-dup").id == first.id
    redis_client.rpush("gate:w2", "open")
    assert _finished(first) == "export 2 done"
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.jobs.export_data:export:2") is None,
        timeout=5,
    )
    redis_client.rpush("gate:w2-next", "open")
    again = on_db.enqueue(2, "gate:w2-next")
    assert again.id != first.id
    assert _finished(again) == "export 2 done"
    assert redis_client.llen("gate:w2-dup:started") == 0


def test_until_executing_and_on_duplicate_raise(worker: Any, redis_client: redis.Redis) -> None:
    from testproject.jobs import make_thumbnail

    on_db = make_thumbnail.using(backend="db")
    first = on_db.enqueue("cat.png", "gate:t")
    with pytest.raises(AlreadyQueued) as refused:
        on_db.enqueue("cat.png", "gate:t-dup")
    assert refused.value.task_id in (str(first.id), None)  # None: its id not written yet
    assert gate_started(redis_client, "gate:t") == "cat.png"
    wait_until(
        lambda: (
            get_lock_manager().get("unique:testproject.jobs.make_thumbnail:thumbnail:cat.png")
            is None
        ),
        timeout=5,
    )
    redis_client.rpush("gate:t-next", "open")
    second = on_db.enqueue("cat.png", "gate:t-next")  # the first runs: a new one queues
    redis_client.rpush("gate:t", "open")
    assert _finished(first) == "thumbnail of cat.png"
    assert _finished(second) == "thumbnail of cat.png"


def test_aenqueue_gets_the_task_already_queued(worker: Any, redis_client: redis.Redis) -> None:
    from testproject.jobs import export_data

    on_db = export_data.using(backend="db")

    async def twice() -> tuple[Any, Any]:
        first = await on_db.aenqueue(3, "gate:a3")
        return first, await on_db.aenqueue(3, "gate:a3-dup")

    first, second = asyncio.run(twice())
    assert second.id == first.id
    # Queued, or running already: the worker polls every 50 ms.
    assert label_of("unique:testproject.jobs.export_data:export:3").endswith(f" as {first.id}")
    redis_client.rpush("gate:a3", "open")
    assert _finished(first) == "export 3 done"


@forks_to_share_its_setup
def test_concurrent_enqueues_from_several_processes_queue_one_task(
    worker: Any, redis_client: redis.Redis
) -> None:
    from django_tasks_db.models import DBTaskResult

    from testproject.jobs import export_data

    def enqueue() -> None:
        export_data.using(backend="db").enqueue(4, "gate:c4")

    connections.close_all()  # each child opens its own SQLite connection
    children = [fork_child(enqueue) for _ in range(6)]
    assert wait_children(children) == [0] * 6
    queued = DBTaskResult.objects.filter(task_path="testproject.jobs.export_data")
    assert queued.count() == 1
    assert gate_started(redis_client, "gate:c4") == "4"
    redis_client.rpush("gate:c4", "open")
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.jobs.export_data:export:4") is None,
        timeout=RESULT_SECONDS,
    )


def test_a_killed_worker_leaves_the_key_to_its_lease(
    worker: Any, redis_client: redis.Redis
) -> None:
    from testproject.jobs import export_data

    export_data.using(backend="db").enqueue(5, "gate:k5")
    assert gate_started(redis_client, "gate:k5") == "5"
    wait_until(
        lambda: "running" in label_of("unique:testproject.jobs.export_data:export:5"), timeout=5
    )
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.jobs.export_data:export:5") is None,
        timeout=15,
    )
    assert time.monotonic() - killed <= RUNNING_LEASE + 5


def test_a_debounced_task_reports_skipped_through_its_result(
    worker: Any, redis_client: redis.Redis
) -> None:
    from django_redis_lock import Skipped
    from testproject.jobs import debounce_export, export_data

    busy = export_data.using(backend="db").enqueue(7, "gate:b7-busy")  # holds the one worker
    assert gate_started(redis_client, "gate:b7-busy") == "7"
    on_db = debounce_export.using(backend="db")
    first = on_db.enqueue(7, "gate:b7")
    last = on_db.enqueue(7, "gate:b7")
    assert last.id != first.id
    redis_client.rpush("gate:b7-busy", "open")
    redis_client.rpush("gate:b7", "open")
    _finished(busy)

    def first_ended() -> bool:
        first.refresh()
        return first.is_finished  # type: ignore[no-any-return]

    wait_until(first_ended, timeout=RESULT_SECONDS, step=0.05)
    assert first.status.name == "FAILED"
    assert first.errors[0].exception_class is Skipped
    assert _finished(last) == "export 7 debounced"
    assert redis_client.llen("gate:b7:started") == 1  # the last only
