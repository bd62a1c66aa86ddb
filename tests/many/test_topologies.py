"""lock_many where one script cannot take every name: a cluster (each name in a slot of its
own) and a quorum. The names are taken one by one in sorted order, given back on failure."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from django.test.utils import override_settings

from django_redis_lock import lock, lock_many
from django_redis_lock.runtime import runtime
from testproject.cluster import ClusterTopology
from testproject.redis_server import RedisServer, RedisServerGroup, find_redis_server
from tests.helpers import SyncDriver
from tests.many import scenarios
from tests.many.scenarios import call

ALIASES = ["m0", "m1", "m2"]


@pytest.fixture(scope="module")
def primaries() -> Iterator[list[RedisServer]]:
    group = RedisServerGroup(binary=find_redis_server())
    try:
        yield [group() for _ in ALIASES]
    finally:
        group.stop_all()


@pytest.fixture
def on_quorum(primaries: list[RedisServer]) -> Iterator[None]:
    """REDIS_LOCK CACHE is a quorum of three primaries (emptied afterwards)."""
    caches = {
        alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}
        for alias, server in zip(ALIASES, primaries, strict=True)
    }
    with override_settings(
        CACHES={**caches, "default": caches["m0"]}, REDIS_LOCK={"CACHE": ALIASES}
    ):
        yield
    for server in primaries:
        with redis.Redis(server.host, server.port) as client:
            client.flushall()


@pytest.fixture(params=["cluster", "quorum"])
def topology(request: pytest.FixtureRequest) -> None:
    """Each topology in turn."""
    request.getfixturevalue("on_cluster" if request.param == "cluster" else "on_quorum")


@pytest.mark.usefixtures("topology")
def test_all_or_none(driver: SyncDriver) -> None:
    scenarios.all_or_none(driver)


@pytest.mark.usefixtures("topology")
def test_fencing_tokens_increase_per_name(driver: SyncDriver) -> None:
    scenarios.tokens_increase(driver)


@pytest.mark.usefixtures("topology")
def test_waits_for_the_busy_name_and_times_out_holding_nothing(driver: SyncDriver) -> None:
    scenarios.waits_and_times_out(driver)


@pytest.mark.usefixtures("topology")
def test_opposite_orders_never_deadlock_nor_overlap() -> None:
    scenarios.opposite_orders(100)


@pytest.mark.usefixtures("topology")
def test_the_watchdog_renews_and_extend_lengthens_every_name() -> None:
    backend = runtime().for_locks(None)
    assert not backend.one_script([backend.keys_for("t1"), backend.keys_for("t2")])
    many = lock_many(["t1", "t2"], timeout=0.4)
    assert many.acquire()
    time.sleep(1.2)  # three leases: only renewals keep them
    assert lock("t1").locked()
    assert lock("t2").locked()
    call(SyncDriver(), many, "extend", 20, replace_ttl=True)
    ttl = lock("t2").ttl()
    assert ttl is not None
    assert ttl > 10
    many.release()
    assert not lock("t1").locked()


def test_a_cluster_keeps_names_in_different_slots(on_cluster: ClusterTopology) -> None:
    """The key layout is a lock's: a name of the set is the lock of that name."""
    with lock_many(["{same}1", "{same}2"]) as many:
        assert set(many.fencing_tokens) == {"{same}1", "{same}2"}
        assert not lock("{same}2").acquire(blocking=False)
