"""@unique on every topology: Sentinel (with WAIT_REPLICAS), a Redis Cluster and a quorum of
independent primaries, each with a real Celery worker and a real db_worker whose locks are
there too."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from django_redis_lock import get_lock_manager
from testproject.redis_server import RedisServer, RedisServerGroup
from tests.celery_worker import celery_worker
from tests.docs.examples import SENTINELS, example_settings
from tests.helpers import gate_started, label_of, wait_until

pytestmark = pytest.mark.slow

RESULT_SECONDS = 30
# django-redis keeps a Sentinel cache's pools per URL for the whole process, and its URL names
# the service: each deployment started here has a service name of its own.
_services = itertools.count()


@contextlib.contextmanager
def sentinel() -> Iterator[dict[str, Any]]:
    from testproject.topology import SentinelTopology

    service = f"unique-sentinel-{next(_services)}"
    with SentinelTopology(service=service) as topology:
        found = example_settings(
            "settings_sentinel_django_redis",
            {SENTINELS: repr(topology.sentinel_addresses), "mymaster": service},
        )
        yield {
            "CACHES": {"default": found["CACHES"]["default"]},
            "REDIS_LOCK": {"WAIT_REPLICAS": 1},
        }


@contextlib.contextmanager
def cluster() -> Iterator[dict[str, Any]]:
    from testproject.cluster import ClusterTopology

    with ClusterTopology(full_coverage=False) as topology:
        found = example_settings(
            "settings_cluster", {"10.0.0.1:6379": topology.url.partition("://")[2]}
        )
        yield {"CACHES": {"default": found["CACHES"]["locks"]}, "REDIS_LOCK": {}}


@contextlib.contextmanager
def quorum() -> Iterator[dict[str, Any]]:
    group = RedisServerGroup()
    try:
        servers = [group() for _ in range(3)]
        caches = {
            f"q{i}": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": server.url,
                "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
            }
            for i, server in enumerate(servers)
        }
        yield {"CACHES": caches, "REDIS_LOCK": {"CACHE": list(caches)}}
    finally:
        group.stop_all()


@pytest.fixture(params=["sentinel", "cluster", "quorum"])
def topology(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The topology's CACHES (merged into the project's) and REDIS_LOCK keys, in force here."""
    start = {"sentinel": sentinel, "cluster": cluster, "quorum": quorum}[request.param]
    with start() as overrides:
        caches = {**settings.CACHES, **overrides["CACHES"]}
        with override_settings(CACHES=caches, REDIS_LOCK=overrides["REDIS_LOCK"]):
            yield overrides


def _env(redis_url: str, overrides: dict[str, Any]) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "TESTPROJECT_CACHES": json.dumps(overrides["CACHES"]),
        "TESTPROJECT_REDIS_LOCK": json.dumps(overrides["REDIS_LOCK"]),
    }


def test_celery(
    topology: dict[str, Any],
    redis_url: str,
    redis_client: redis.Redis,
    celery_broker_server: RedisServer,
    tmp_path: Path,
) -> None:
    from testproject.tasks import rebuild_report

    with celery_worker(celery_broker_server, tmp_path, _env(redis_url, topology)):
        first = rebuild_report.delay(11, "gate:t11")
        assert rebuild_report.delay(11, "gate:t11-dup").id == first.id
        assert gate_started(redis_client, "gate:t11") == "11"
        wait_until(
            lambda: (
                f"running as {first.id}"
                in label_of("unique:testproject.tasks.rebuild_report:report:11")
            ),
            timeout=5,
        )
        assert rebuild_report.delay(11, "gate:t11-dup").id == first.id
        redis_client.rpush("gate:t11", "open")
        assert first.get(timeout=RESULT_SECONDS) == "report 11 rebuilt"
        wait_until(
            lambda: (
                get_lock_manager().get("unique:testproject.tasks.rebuild_report:report:11") is None
            ),
            timeout=5,
        )
    assert redis_client.llen("gate:t11-dup:started") == 0


@pytest.mark.django_db(transaction=True)
def test_django_tasks(
    topology: dict[str, Any], redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    if settings.TASKS_FRAMEWORK is None:
        pytest.skip("neither django.tasks (Django 6.0+) nor django-tasks is installed")
    pytest.importorskip("django_tasks_db", reason="django-tasks-db is not installed")
    from testproject.jobs import export_data
    from tests.unique.test_django_tasks import _finished, db_worker

    with db_worker(redis_url, tmp_path, _env(redis_url, topology)):
        on_db = export_data.using(backend="db")
        first = on_db.enqueue(12, "gate:t12")
        assert on_db.enqueue(12, "gate:t12-dup").id == first.id
        assert gate_started(redis_client, "gate:t12") == "12"
        wait_until(
            lambda: (
                f"running as {first.id}"
                in label_of("unique:testproject.jobs.export_data:export:12")
            ),
            timeout=5,
        )
        redis_client.rpush("gate:t12", "open")
        assert _finished(first) == "export 12 done"
        wait_until(
            lambda: get_lock_manager().get("unique:testproject.jobs.export_data:export:12") is None,
            timeout=5,
        )
    assert redis_client.llen("gate:t12-dup:started") == 0
