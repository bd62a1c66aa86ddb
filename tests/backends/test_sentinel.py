"""Locks on Redis Sentinel: one primary, two replicas and three sentinels started here, reached
through django-redis's SentinelClient, Django's RedisCache with redis-py's
SentinelConnectionPool and django-valkey's SentinelClient, before and after a failover and a
SIGKILL of the primary."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import django_redis.pool
import django_valkey.pool  # type: ignore[import-untyped]
import pytest
import redis
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import Client
from django.test.utils import override_settings

from django_redis_lock import LockError, LockUnavailable, get_lock_manager, lock
from django_redis_lock.runtime import runtime
from testproject.topology import SentinelTopology
from tests.cached.scenarios import stampede, stats_of
from tests.docs.examples import SENTINELS, example_settings
from tests.helpers import (
    SyncDriver,
    doctor,
    held_past_first_lease,
    keys,
    levels,
    server_backend,
    start,
    wait_until,
)
from tests.leader.scenarios import leads_hands_over_and_is_deposed
from tests.rate.scenarios import (
    admits_rate_and_burst_then_refuses,
    waiters_get_distinct_turns_in_order,
)

# One topology for the module (xdist's --dist loadfile keeps a module's tests on one worker).
pytestmark = pytest.mark.slow

# Not "mymaster": django-redis keeps its pools per URL for the whole process.
SERVICE = "locks-sentinel"
CHANGELIST = "/admin/django_redis_lock/lock/"


def sentinel_caches(sentinels: list[tuple[str, int]], kind: str) -> dict[str, Any]:
    """The "default" alias on Sentinel, configured as the documentation shows (its examples
    settings_sentinel_*.py, with the test topology's addresses)."""
    example = {
        "builtin": "settings_sentinel_builtin",
        "django-redis": "settings_sentinel_django_redis",
    }
    found = example_settings(
        example.get(kind, "settings_sentinel_valkey"),
        {SENTINELS: repr(sentinels), "mymaster": SERVICE},
    )
    assert found["REDIS_LOCK"] == {"WAIT_REPLICAS": 1}
    return {"default": found["CACHES"]["default"]}


@pytest.fixture(scope="module")
def topology() -> Iterator[SentinelTopology]:
    with SentinelTopology(service=SERVICE) as started:
        # django-redis keeps one pool per URL for the whole process, sentinels included: one
        # made for an earlier topology of this service would ask sentinels long gone.
        django_redis.pool.ConnectionFactory._pools.clear()
        yield started


@pytest.fixture(params=["django-redis", "builtin", "django-valkey"])
def on_sentinel(request: pytest.FixtureRequest, topology: SentinelTopology) -> Iterator[str]:
    """The "default" cache on the topology, through each client in turn; the topology made
    whole and emptied afterwards."""
    # django-redis and django-valkey keep one pool per URL for the whole process, sentinels
    # included: one made for an earlier topology of this service would ask sentinels long
    # gone. Neither has a public way to forget them.
    django_redis.pool.ConnectionFactory._pools.clear()
    django_valkey.pool.BaseConnectionFactory._pools.clear()
    with override_settings(CACHES=sentinel_caches(topology.sentinel_addresses, request.param)):
        wait_until(_answers, timeout=15, step=0.1)  # sentinels and primary ready for locks
        yield request.param
    topology.settle()
    primary = topology.primary()
    with redis.Redis(primary.host, primary.port) as client:
        client.flushall()


def _answers() -> bool:
    try:
        with lock("sentinel:ready", blocking=False, auto_renew=False):
            return True
    except LockError:
        return False


def on_primary(topology: SentinelTopology, name: str) -> bool:
    """Whether the lock ``name`` is held on the server the sentinels call the primary."""
    primary = topology.primary()
    with redis.Redis(primary.host, primary.port) as client:
        return bool(client.exists(keys(name).lock))


def waiter(name: str, blocking_timeout: float) -> Future[tuple[bool | BaseException, float]]:
    """A thread waiting for ``name``: whether it got it (or what it raised), and when it
    finished (time.monotonic()); it releases what it got."""

    def run() -> tuple[bool | BaseException, float]:
        waiting = lock(name, blocking_timeout=blocking_timeout, timeout=10, auto_renew=False)
        try:
            got = waiting.acquire()
        except LockUnavailable as exc:
            return exc, time.monotonic()
        done = time.monotonic()
        if got:
            with contextlib.suppress(LockError):
                waiting.release()
        return got, done

    return start(run)


def queued(topology: SentinelTopology, name: str, count: int = 1) -> None:
    primary = topology.primary()
    with redis.Redis(primary.host, primary.port) as client:
        wait_until(lambda: client.zcard(keys(name).queue) >= count)


def subscribed_on(topology: SentinelTopology) -> bool:
    """Whether this process's listener is subscribed on the current primary."""
    channel = runtime().one_listener(runtime().backend()).channel
    primary = topology.primary()
    with redis.Redis(primary.host, primary.port) as client:
        return bool(client.pubsub_numsub(channel)[0][1])


@pytest.mark.usefixtures("on_sentinel")
def test_acquire_release_on_the_primary(topology: SentinelTopology, driver: SyncDriver) -> None:
    # Blocking calls go on the lane (connections beside the pool), which follows the primary as
    # the pool does: the failover tests below run through it.
    assert server_backend().lane is not None
    held = lock("sentinel:plain", timeout=10)
    assert driver.acquire(held)
    assert on_primary(topology, "sentinel:plain")
    assert not driver.acquire(lock("sentinel:plain", blocking=False))
    driver.release(held)
    assert get_lock_manager().get("sentinel:plain") is None


@pytest.mark.usefixtures("on_sentinel")
def test_waiter_is_handed_the_lock(driver: SyncDriver) -> None:
    holder = lock("sentinel:wait", timeout=10, auto_renew=False)
    assert driver.acquire(holder)
    waiting = lock("sentinel:wait", blocking_timeout=5)
    result = start(lambda: (driver.acquire(waiting), time.monotonic()))
    wait_until(lambda: runtime_waiters("sentinel:wait"))
    released = time.monotonic()
    driver.release(holder)
    got, at = result.result(10)
    assert got
    assert at - released < 1
    driver.release(waiting)


def runtime_waiters(name: str) -> int:
    client = server_backend().client
    return int(client.zcard(keys(name).queue))


@pytest.mark.usefixtures("on_sentinel")
def test_watchdog_renews(topology: SentinelTopology) -> None:
    held = held_past_first_lease("sentinel:renewed")
    assert on_primary(topology, "sentinel:renewed")
    held.release()


@pytest.mark.django_db
@pytest.mark.usefixtures("on_sentinel")
def test_listing_command_and_admin(admin_client: Client) -> None:
    held = lock("report:sentinel", timeout=30, label="nightly")
    assert held.acquire()
    info = get_lock_manager().get("report:sentinel")
    assert info is not None
    assert info.fencing_token == held.fencing_token
    assert [each.name for each in get_lock_manager().list("report:*")] == ["report:sentinel"]
    out = io.StringIO()
    call_command("locks", "list", "--json", stdout=out)
    assert [each["name"] for each in json.loads(out.getvalue())] == ["report:sentinel"]
    page = admin_client.get(CHANGELIST).content.decode()
    assert "report:sentinel" in page
    assert "nightly" in page
    held.release()


@pytest.mark.usefixtures("on_sentinel")
def test_locks_work_with_wait_replicas(settings: Any) -> None:
    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 1}
    holder = lock("sentinel:acked", timeout=10, auto_renew=False)
    assert holder.acquire()
    later = waiter("sentinel:acked", blocking_timeout=5)
    wait_until(lambda: runtime_waiters("sentinel:acked"))
    holder.release()
    got, _ = later.result(10)
    assert got is True


def _after_a_change(topology: SentinelTopology, change: str) -> None:
    """What must hold when the primary changes under a process that holds and waits."""
    holder = lock("sentinel:moved", timeout=5, auto_renew=False)
    assert holder.acquire()
    # Queued across the change, and still waiting when the sentinels announce the new primary
    # (about 3.2 s after a SIGKILL): a listener whose waiters are gone stops reconnecting.
    across = waiter("sentinel:moved", blocking_timeout=6)
    queued(topology, "sentinel:moved")
    wait_until(lambda: subscribed_on(topology), timeout=5)  # it subscribes after it queued
    queued_at = time.monotonic()

    new = topology.failover() if change == "failover" else topology.kill_primary()
    # Clients learn a new primary once the sentinels list it in SENTINEL MASTERS, about a
    # second after they name it to GET-MASTER-ADDR-BY-NAME (under load, more).
    topology.wait_until_announced(new)
    changed = time.monotonic()
    # The listener follows the new primary within a second of that.
    wait_until(lambda: subscribed_on(topology), timeout=1.5)
    assert topology.primary() is new
    with contextlib.suppress(LockError):  # the hold may be lost with the old primary
        holder.release()

    # The waiter queued across the change is served or told, within its blocking_timeout.
    got, done = across.result(10)
    assert got is True or isinstance(got, LockUnavailable) or got is False
    assert done - queued_at < 6 + 1  # its blocking_timeout, and a round trip or two

    # Locks keep working on the new primary, and a new waiter is woken by a release at once.
    again = lock("sentinel:after", timeout=10, auto_renew=False)
    assert wait_until(lambda: _acquired(again), timeout=3)
    assert on_primary(topology, "sentinel:after")
    later = waiter("sentinel:after", blocking_timeout=5)
    queued(topology, "sentinel:after")
    released = time.monotonic()
    again.release()
    got, at = later.result(10)
    assert got is True
    assert at - released < 1
    assert changed - queued_at < 10

    async def main() -> None:
        async with lock("sentinel:async", timeout=10):
            assert on_primary(topology, "sentinel:async")

    asyncio.run(main())


def _acquired(held: Any) -> bool:
    try:
        return bool(held.acquire(blocking=False))
    except LockUnavailable:
        return False


@pytest.mark.usefixtures("on_sentinel")
def test_failover(topology: SentinelTopology) -> None:
    _after_a_change(topology, "failover")


# One client only: an election costs more than a failover, and the module should stay quick.
@pytest.mark.parametrize("on_sentinel", ["django-redis"], indirect=True)
@pytest.mark.usefixtures("on_sentinel")
def test_primary_killed(topology: SentinelTopology) -> None:
    _after_a_change(topology, "kill")


@pytest.mark.usefixtures("on_sentinel")
def test_checks_and_the_doctor_ask_for_every_replica() -> None:
    """Two replicas: WAIT_REPLICAS = 1 lets a partition that leaves one of them with the old
    primary grant on both sides (W011); 2 is safe. The README's socket timeout (2 s) outlasts
    WAIT_TIMEOUT (1 s) by enough: no W012."""
    with override_settings(REDIS_LOCK={"WAIT_REPLICAS": 1}):
        found = {message.id: message.msg for message in run_checks(tags=["caches"])}
        assert "django_redis_lock.W011" in found
        assert "has 2 connected replicas" in found["django_redis_lock.W011"]
        assert "django_redis_lock.W012" not in found
        _, findings, _ = doctor()
        assert levels(findings)["replicas"] == "warning"
    with override_settings(REDIS_LOCK={"WAIT_REPLICAS": 2}):
        ids = {message.id for message in run_checks(tags=["caches"])}
        assert not ids & {"django_redis_lock.W011", "django_redis_lock.W005"}
        status, findings, _ = doctor()
        assert levels(findings)["replicas"] == "ok"
        assert levels(findings)["socket-timeout"] == "ok"
        assert status == 0


@pytest.mark.usefixtures("on_sentinel")
def test_semaphores_and_read_write_locks_with_wait_replicas(settings: Any) -> None:
    from django_redis_lock import rwlock, semaphore

    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 1}
    first, second = semaphore("sentinel:pool", 2), semaphore("sentinel:pool", 2)
    assert first.acquire()
    assert second.acquire()
    third = semaphore("sentinel:pool", 2, blocking_timeout=5)
    waiting = start(third.acquire)
    backend = server_backend()
    wait_until(lambda: backend.client.zcard(backend.shared_keys_for("sentinel:pool").queue))
    first.release()
    assert waiting.result(10) is True  # handed over, and the grant acknowledged by a replica
    assert {info.fencing_token for info in get_lock_manager().holders("sentinel:pool")} == {
        second.fencing_token,
        third.fencing_token,
    }
    second.release()
    third.release()
    with rwlock("sentinel:doc").read(), rwlock("sentinel:doc").read():
        assert not rwlock("sentinel:doc").write().acquire(blocking=False)


@pytest.mark.usefixtures("on_sentinel")
def test_a_leadership_leads_hands_over_and_is_deposed_with_wait_replicas(
    settings: Any, driver: SyncDriver
) -> None:
    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 2}
    leads_hands_over_and_is_deposed(driver, "sentinel")


@pytest.mark.usefixtures("on_sentinel")
def test_a_rate_limit_with_wait_replicas(settings: Any, driver: SyncDriver) -> None:
    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 2, "WAIT_TIMEOUT": 2}
    admits_rate_and_burst_then_refuses(driver, "sentinel:rate")
    waiters_get_distinct_turns_in_order(driver, "sentinel:rate-queue")


def _turn_or_none(limit: Any) -> Any:
    try:
        return limit.reserve(0.0)
    except LockUnavailable:  # the client has not found the new primary yet
        return None


# One client and one driver: a failover costs seconds, and the module should stay quick.
@pytest.mark.parametrize("on_sentinel", ["django-redis"], indirect=True)
@pytest.mark.usefixtures("on_sentinel")
def test_a_rate_limit_survives_a_failover_with_wait_replicas(
    topology: SentinelTopology, settings: Any
) -> None:
    """Each admission acknowledged by both replicas (WAIT): whichever the sentinels promote
    has the calls, and refuses within the window as the old primary did."""
    from django_redis_lock import rate_limit

    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 2, "WAIT_TIMEOUT": 2}
    limit = rate_limit("sentinel:rate-failover", "1/m", burst=2)
    assert [limit.acquire(blocking=False) for _ in range(4)] == [True, True, True, False]
    new = topology.failover()
    topology.wait_until_announced(new)
    # Sentinel turns the old primary into a replica only about 10 s after the failover; until
    # then the new primary has one replica, and an acknowledgement by two cannot come.
    topology.settle()
    turn = wait_until(lambda: _turn_or_none(limit), timeout=10, step=0.1)
    assert (turn.admitted, topology.primary()) == (False, new)
    assert 30 < turn.retry_after <= 60
    assert 30 < limit.retry_after() <= 60


@pytest.mark.parametrize("on_sentinel", ["django-redis"], indirect=True)
@pytest.mark.usefixtures("on_sentinel")
def test_an_async_rate_limit_follows_the_failover_with_wait_replicas(
    topology: SentinelTopology, settings: Any
) -> None:
    """The async client's connections went to the old primary, a replica once the failover
    ends (Redis 6.2 reports its READONLY inside the script's error): the next call asks the
    sentinels and runs on the new primary."""
    from django_redis_lock import rate_limit

    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 2, "WAIT_TIMEOUT": 2}
    limit = rate_limit("sentinel:arate-failover", "1/m", burst=2)

    async def scenario() -> Any:
        assert [await limit.aacquire(blocking=False) for _ in range(4)] == [
            True,
            True,
            True,
            False,
        ]
        new = await asyncio.to_thread(topology.failover)
        await asyncio.to_thread(topology.wait_until_announced, new)
        await asyncio.to_thread(topology.settle)  # the old primary is a replica now
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(LockUnavailable):  # until the client finds the primary
                return await limit.areserve(0.0), new
            await asyncio.sleep(0.1)
        raise AssertionError("no turn from the new primary within 10 s")

    turn, new = asyncio.run(scenario())
    assert (turn.admitted, topology.primary()) == (False, new)
    assert 30 < turn.retry_after <= 60


@pytest.mark.usefixtures("on_sentinel")
def test_cache_once_fills_once_with_wait_replicas(settings: Any) -> None:
    settings.REDIS_LOCK = {**settings.REDIS_LOCK, "WAIT_REPLICAS": 2, "WAIT_TIMEOUT": 2}
    assert stampede("sentinel:fill", 3) == ["v"] * 4
    assert stats_of("sentinel:fill").avoided == 3
