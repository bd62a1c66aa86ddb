"""@unique Celery tasks, sent from this process and run by a real worker process."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from django_redis_lock import AlreadyQueued, get_lock_manager
from django_redis_lock.backends.base import text_of
from testproject.redis_server import RedisServer
from tests.celery_worker import celery_worker, on_broker
from tests.helpers import (
    fork_child,
    forks_to_share_its_setup,
    gate_started,
    label_of,
    wait_children,
    wait_until,
)

celery = pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")

pytestmark = pytest.mark.slow

RESULT_SECONDS = 30
# The worker's lock timeout: the lease of a running task's key, renewed while it runs; short,
# so that a killed worker's key ends soon.
RUNNING_LEASE = 2


@pytest.fixture(scope="module")
def worker_env(redis_url: str) -> dict[str, str]:
    return {"REDIS_URL": redis_url, "TESTPROJECT_REDIS_LOCK": json.dumps({"TIMEOUT": 2})}


@pytest.fixture
def worker(
    worker_env: dict[str, str], celery_broker_server: RedisServer, tmp_path: Path
) -> Iterator[None]:
    """A Celery worker process of its own (a test may kill it)."""
    with celery_worker(celery_broker_server, tmp_path, worker_env):
        yield


@pytest.mark.usefixtures("worker")
def test_a_duplicate_gets_the_task_already_queued_then_running(redis_client: redis.Redis) -> None:
    from testproject.tasks import rebuild_report

    first = rebuild_report.apply_async((1, "gate:u1"), countdown=1)
    assert (
        label_of("unique:testproject.tasks.rebuild_report:report:1")
        == f"testproject.tasks.rebuild_report queued as {first.id}"
    )
    again = rebuild_report.delay(1, "gate:u1-other")
    assert again.id == first.id  # queued: the same task, nothing sent
    assert gate_started(redis_client, "gate:u1") == "1"
    wait_until(
        lambda: "running" in label_of("unique:testproject.tasks.rebuild_report:report:1"),
        timeout=RESULT_SECONDS,
    )
    assert rebuild_report.delay(1, "gate:u1-other").id == first.id  # running: the same task
    other = rebuild_report.delay(2, "gate:u2")  # another key
    assert other.id != first.id
    redis_client.rpush("gate:u1", "open")
    redis_client.rpush("gate:u2", "open")
    assert first.get(timeout=RESULT_SECONDS) == "report 1 rebuilt"
    assert other.get(timeout=RESULT_SECONDS) == "report 2 rebuilt"
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:1") is None,
        timeout=5,
    )
    redis_client.rpush("gate:u1-third", "open")
    third = rebuild_report.delay(1, "gate:u1-third")  # the key is free again
    assert third.id != first.id
    assert third.get(timeout=RESULT_SECONDS) == "report 1 rebuilt"
    assert redis_client.llen("gate:u1-other:started") == 0  # no duplicate ever ran


@pytest.mark.usefixtures("worker")
def test_until_executing_frees_the_key_when_the_task_starts(redis_client: redis.Redis) -> None:
    from testproject.tasks import send_digest

    first = send_digest.apply_async((7, "gate:d7"), countdown=1)
    with pytest.raises(AlreadyQueued) as refused:
        send_digest.delay(7, "gate:d7-dup")
    assert refused.value.task_id == first.id
    assert gate_started(redis_client, "gate:d7") == "7"
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.tasks.send_digest:digest:7") is None,
        timeout=5,
    )
    redis_client.rpush("gate:d7-next", "open")
    second = send_digest.delay(7, "gate:d7-next")  # running, not queued: a new one queues
    assert second.id != first.id
    redis_client.rpush("gate:d7", "open")
    assert first.get(timeout=RESULT_SECONDS) == "digest 7 sent"
    assert second.get(timeout=RESULT_SECONDS) == "digest 7 sent"


@pytest.mark.usefixtures("worker")
def test_a_retry_keeps_the_key(redis_client: redis.Redis) -> None:
    from testproject.tasks import sync_account

    first = sync_account.delay("acme", "gate:s")
    assert gate_started(redis_client, "gate:s") == "acme:0"
    redis_client.rpush("gate:s", "open")  # the first run fails and is retried
    assert gate_started(redis_client, "gate:s") == "acme:1"
    assert sync_account.delay("acme", "gate:s-dup").id == first.id  # the retry holds it
    assert f"running as {first.id}" in label_of("unique:testproject.tasks.sync_account:sync:acme")
    redis_client.rpush("gate:s", "open")
    assert first.get(timeout=RESULT_SECONDS) == "account acme synced"
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.tasks.sync_account:sync:acme") is None,
        timeout=5,
    )


@pytest.mark.usefixtures("worker")
def test_a_revoked_task_frees_its_key(redis_client: redis.Redis) -> None:
    from testproject.tasks import rebuild_report

    queued = rebuild_report.apply_async((3, "gate:r3"), countdown=2)
    assert get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:3") is not None
    queued.revoke()
    # The worker drops the revoked task when its countdown ends, and frees its key then,
    # long before the key's lease (an hour) would.
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:3") is None,
        timeout=15,
    )
    assert redis_client.llen("gate:r3:started") == 0


def test_a_killed_worker_leaves_the_key_to_its_lease(
    redis_client: redis.Redis,
    worker_env: dict[str, str],
    celery_broker_server: RedisServer,
    tmp_path: Path,
) -> None:
    from testproject.tasks import rebuild_report

    with celery_worker(celery_broker_server, tmp_path, worker_env) as process:
        running = rebuild_report.delay(4, "gate:k4")
        assert gate_started(redis_client, "gate:k4") == "4"
        wait_until(
            lambda: "running" in label_of("unique:testproject.tasks.rebuild_report:report:4"),
            timeout=5,
        )
        os.kill(process.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(
            lambda: (
                get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:4") is None
            ),
            timeout=15,
        )
        # The running lease, no longer renewed, ends it: not the hour a queued key has.
        assert time.monotonic() - killed <= RUNNING_LEASE + 5
        assert running.id


@forks_to_share_its_setup
@pytest.mark.usefixtures("worker")
def test_concurrent_enqueues_from_several_processes_send_one_task(
    redis_client: redis.Redis, redis_url: str
) -> None:
    from testproject.tasks import rebuild_report

    def enqueue() -> None:
        sent = rebuild_report.delay(5, "gate:c5").id
        with redis.Redis.from_url(redis_url) as client:  # the child's own connection
            client.rpush("sent", sent)

    children = [fork_child(enqueue) for _ in range(6)]
    assert wait_children(children) == [0] * 6
    sent = {text_of(value) for value in redis_client.lrange("sent", 0, -1)}
    assert len(sent) == 1  # every process got the one task sent
    assert gate_started(redis_client, "gate:c5") == "5"
    redis_client.rpush("gate:c5", "open")
    assert rebuild_report.AsyncResult(sent.pop()).get(timeout=RESULT_SECONDS) == "report 5 rebuilt"
    assert redis_client.llen("gate:c5:started") == 0  # it ran once


def test_eager_mode_and_a_failed_send_give_the_key_back(
    redis_client: redis.Redis, celery_broker_server: RedisServer
) -> None:
    from testproject.celery import app
    from testproject.tasks import rebuild_report

    with on_broker(celery_broker_server):
        _eager_then_failed_send(app, rebuild_report, redis_client)


def _eager_then_failed_send(app: Any, rebuild_report: Any, redis_client: redis.Redis) -> None:
    app.conf.task_always_eager = True
    try:
        redis_client.rpush("gate:e6", "open")
        assert rebuild_report.delay(6, "gate:e6").get() == "report 6 rebuilt"  # run at once
        assert get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:6") is None
    finally:
        app.conf.task_always_eager = False
    from kombu.exceptions import SerializerNotInstalled

    with pytest.raises(SerializerNotInstalled):  # the key is taken, then the send fails
        rebuild_report.apply_async((6, "gate:e6"), serializer="no-such-serializer")
    assert (
        get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:6") is None
    )  # given back


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize(
    "task_id",
    ["x" * 300, "report 8 of 2024", "tab\there\nnew%20line \u00e9\u2028", "-" * 5000],
    ids=["long", "spaces", "odd-characters", "very-long"],
)
def test_any_task_id_celery_takes_is_the_one_a_duplicate_gets(
    redis_client: redis.Redis, task_id: str
) -> None:
    from testproject.tasks import rebuild_report, send_digest

    first = rebuild_report.apply_async((8, "gate:t8"), task_id=task_id, countdown=1)
    assert first.id == task_id
    assert rebuild_report.delay(8, "gate:t8-dup").id == task_id  # at once, not after a wait
    digest = send_digest.apply_async((8, "gate:t8d"), task_id=task_id + "-digest", countdown=1)
    with pytest.raises(AlreadyQueued) as refused:
        send_digest.delay(8, "gate:t8d-dup")
    assert refused.value.task_id == digest.id
    assert gate_started(redis_client, "gate:t8") == "8"
    wait_until(
        lambda: "running" in label_of("unique:testproject.tasks.rebuild_report:report:8"),
        timeout=RESULT_SECONDS,
    )
    assert rebuild_report.delay(8, "gate:t8-dup").id == task_id  # running: the same task
    redis_client.rpush("gate:t8", "open")
    redis_client.rpush("gate:t8d", "open")
    assert first.get(timeout=RESULT_SECONDS) == "report 8 rebuilt"
    assert digest.get(timeout=RESULT_SECONDS) == "digest 8 sent"
    wait_until(
        lambda: get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:8") is None,
        timeout=5,
    )
    assert redis_client.llen("gate:t8-dup:started") == 0  # no duplicate ever ran


@pytest.mark.usefixtures("worker")
def test_a_debounce_of_a_running_task_runs_after_it_not_beside_it(
    redis_client: redis.Redis,
) -> None:
    from testproject.tasks import debounce_report

    running = debounce_report.delay(10, "gate:r10a")
    assert gate_started(redis_client, "gate:r10a") == "10"  # runs, its gate closed
    later = debounce_report.delay(10, "gate:r10b")  # replaces the running task's key
    assert later.id != running.id
    redis_client.rpush("gate:r10b", "open")  # the later one would pass at once if it started
    # It waits for the run before it to end (the worker has threads to spare): not started.
    assert redis_client.blpop(["gate:r10b:started"], timeout=2) is None
    redis_client.rpush("gate:r10a", "open")
    assert running.get(timeout=RESULT_SECONDS) == "report 10 debounced"
    assert gate_started(redis_client, "gate:r10b") == "10"  # then the later one runs
    assert later.get(timeout=RESULT_SECONDS) == "report 10 debounced"


@pytest.mark.usefixtures("worker")
def test_a_debounced_task_reports_skipped_through_its_asyncresult(
    redis_client: redis.Redis,
) -> None:
    from django_redis_lock import Skipped
    from testproject.tasks import debounce_report

    first = debounce_report.apply_async((9, "gate:b9"), countdown=1)
    last = debounce_report.apply_async((9, "gate:b9"), countdown=1)
    assert last.id != first.id
    assert gate_started(redis_client, "gate:b9") == "9"  # one of them runs: the last
    with pytest.raises(Skipped) as skipped:
        first.get(timeout=RESULT_SECONDS)
    assert skipped.value.task_id == last.id
    redis_client.rpush("gate:b9", "open")
    assert last.get(timeout=RESULT_SECONDS) == "report 9 debounced"
    assert redis_client.llen("gate:b9:started") == 0  # the first never started its body
