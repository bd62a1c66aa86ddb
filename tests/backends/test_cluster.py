"""Locks on a Redis Cluster started here (three primaries with a replica each), reached through
django-valkey's ClusterValkeyCache as the README configures it: every part of the product, and
a primary killed under a running process."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import time
from functools import partial
from typing import Any

import pytest
import valkey
from django.core.management import call_command
from django.test import Client
from django.test.utils import override_settings
from valkey.backoff import NoBackoff
from valkey.retry import Retry

from django_redis_lock import (
    Lock,
    LockBusy,
    LockError,
    LockUnavailable,
    get_lock_manager,
    lock,
    locked,
    rate_limit,
)
from django_redis_lock.backends.cluster import ClusterLockBackend
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.runtime import runtime
from testproject.cluster import ClusterTopology
from testproject.topology import call
from tests.backends.conftest import cluster_caches
from tests.cached.scenarios import stampede, stats_of
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

# One cluster for the module (xdist's --dist loadfile keeps a module's tests on one worker).
pytestmark = pytest.mark.slow

CHANGELIST = "/admin/django_redis_lock/lock/"


def holder_of(cluster: ClusterTopology, name: str) -> int:
    """The port of the primary that holds the lock ``name``'s key, checked on that node."""
    key = keys(name).lock
    server = cluster.primary_of(key)
    with valkey.Valkey(server.host, server.port) as client:
        assert client.exists(key)
    return server.port


def spread_names(cluster: ClusterTopology, prefix: str, per_primary: int) -> list[str]:
    """Lock names whose keys fall ``per_primary`` on each primary."""
    by_port: dict[int, list[str]] = {}
    for i in range(10_000):
        name = f"{prefix}{i}"
        port = cluster.primary_of(keys(name).lock).port
        if len(by_port.setdefault(port, [])) < per_primary:
            by_port[port].append(name)
        if len(by_port) == len(cluster.primaries()) and all(
            len(names) == per_primary for names in by_port.values()
        ):
            break
    return sorted(name for names in by_port.values() for name in names)


def test_backend_is_the_cluster_backend(on_cluster: ClusterTopology) -> None:
    backend = runtime().backend()
    assert isinstance(backend, ClusterLockBackend)
    assert len(backend.primaries()) == 3


def test_acquire_extend_release_with_fencing(
    on_cluster: ClusterTopology, driver: SyncDriver
) -> None:
    first = lock("cluster:plain", timeout=10, auto_renew=False)
    assert driver.acquire(first)
    holder_of(on_cluster, "cluster:plain")
    assert not driver.acquire(lock("cluster:plain", blocking=False))
    driver.extend(first, 20, replace_ttl=True)
    assert 19 < (driver.ttl(first) or 0) <= 20
    token = first.fencing_token
    assert token is not None
    driver.release(first)
    second = lock("cluster:plain", timeout=10, auto_renew=False)
    assert driver.acquire(second)
    assert (second.fencing_token or 0) > token
    driver.release(second)
    assert not driver.locked(second)


def _acquired_at(driver: SyncDriver, waiting: Lock) -> tuple[bool, float]:
    """Acquire ``waiting``; whether it got it, and when."""
    return driver.acquire(waiting), time.monotonic()


def test_waiter_is_woken_by_the_release(on_cluster: ClusterTopology, driver: SyncDriver) -> None:
    # Names on two different primaries: the listener hears grants published on any node.
    for name in spread_names(on_cluster, "cluster:wait:", 1):
        holder = lock(name, timeout=10, auto_renew=False)
        assert driver.acquire(holder)
        waiting = lock(name, blocking_timeout=5, auto_renew=False)
        queue = keys(name).queue
        result = start(partial(_acquired_at, driver, waiting))
        wait_until(partial(server_backend().client.zcard, queue))
        released = time.monotonic()
        driver.release(holder)
        got, at = result.result(10)
        assert got is True
        assert at - released < 1  # woken by the hand-over, not by the end of a lease
        driver.release(waiting)


def test_watchdog_renews(on_cluster: ClusterTopology) -> None:
    held = held_past_first_lease("cluster:renewed")
    holder_of(on_cluster, "cluster:renewed")
    held.release()


def test_locked_decorator(on_cluster: ClusterTopology) -> None:
    @locked("cluster:job:{n}", timeout=10)
    def job(n: int) -> bool:
        return bool(server_backend().client.exists(keys(f"cluster:job:{n}").lock) == 1)

    assert job(1)
    with lock("cluster:job:2", timeout=10), pytest.raises(LockBusy):
        job(2)


@pytest.mark.django_db
def paged(manager: LockManager, pattern: str, size: int) -> list[str]:
    """The names of every page of ``pattern``'s listing, sorted (each page at most 20)."""
    seen: list[str] = []
    cursor = ""
    for _ in range(20):
        page = manager.page(pattern, cursor, size=size)
        seen += [info.name for info in page.locks]
        cursor = page.next_cursor
        if not cursor:
            break
    return sorted(seen)


def test_listing_paging_command_admin_and_clear(
    on_cluster: ClusterTopology, admin_client: Client
) -> None:
    names = spread_names(on_cluster, "report:", 4)
    held = [lock(name, timeout=30, label="nightly") for name in names]
    for each in held:
        assert each.acquire()
    assert len({holder_of(on_cluster, name) for name in names}) == 3
    manager = get_lock_manager()

    assert sorted(info.name for info in manager.list("report:*")) == names
    assert paged(manager, "report:*", 3) == names  # every primary, each lock once

    out = io.StringIO()
    call_command("locks", "list", "--json", stdout=out)
    assert sorted(each["name"] for each in json.loads(out.getvalue())) == names

    shown: list[str] = []
    url = CHANGELIST
    for _ in range(len(names) + 3):
        page_html = admin_client.get(url).content.decode()
        shown += [name for name in names if f">{name}<" in page_html]
        found = re.search(r'href="(\?[^"]*cursor=[^"]+)"', page_html)
        if found is None:
            break
        url = CHANGELIST + found[1].replace("&amp;", "&")
    assert sorted(set(shown)) == names

    info = manager.get(names[0])
    assert info is not None
    assert info.fencing_token == held[0].fencing_token
    assert manager.release(names[0])
    assert manager.get(names[0]) is None
    assert manager.clear("report:*") == len(names) - 1
    assert list(manager.list()) == []


def test_rate_limits_on_every_primary_are_listed_paged_and_cleared(
    on_cluster: ClusterTopology,
) -> None:
    names = spread_names(on_cluster, "rate:", 2)
    for name in names:
        assert rate_limit(name, "1/h", burst=1).acquire(blocking=False)
    manager = get_lock_manager()
    listed = list(manager.list("rate:*"))
    assert sorted(info.name for info in listed) == names
    assert {(info.kind, info.held_as) for info in listed} == {("rate", "rate 1/h, burst 1")}
    assert paged(manager, "rate:*", 2) == names
    info = manager.get_rate(names[0])
    assert info is not None
    assert info.rate is not None
    assert info.rate.shown == "1 of 2 used"
    assert manager.clear("rate:*") == len(names)
    assert list(manager.list()) == []


def test_async_listing_and_locks(on_cluster: ClusterTopology) -> None:
    async def main() -> list[str]:
        async with lock("cluster:async:a", timeout=10), lock("cluster:async:b", timeout=10):
            return sorted(info.name for info in get_lock_manager().list("cluster:async:*"))

    assert asyncio.run(main()) == ["cluster:async:a", "cluster:async:b"]


def test_client_errors_become_lock_unavailable(on_cluster: ClusterTopology) -> None:
    # A cluster none of whose nodes answers: valkey-py's own errors must not escape.
    nowhere = override_settings(CACHES=cluster_caches("valkey://127.0.0.1:1"))
    with nowhere, pytest.raises(LockUnavailable):
        lock("cluster:nowhere", blocking=False).acquire()


def test_primary_killed(on_cluster: ClusterTopology) -> None:
    """A primary SIGKILLed under a running process: locks of other primaries keep working,
    no call hangs past its timeout, and once a replica took over, the failed slots' locks work
    again from the same process, with their waiters woken."""
    victim, survivor = spread_names(on_cluster, "cluster:kill:", 1)[:2]
    held = lock(victim, timeout=30, auto_renew=False)
    assert held.acquire()
    key = keys(victim).lock
    old = on_cluster.primary_of(key)
    assert on_cluster.primary_of(keys(survivor).lock) is not old
    old.kill()
    try:
        # Once the cluster flagged the primary failed, and while it elects a replica, the
        # other primaries' locks work (cluster-require-full-coverage no).
        on_cluster.wait_failed(old)
        other = lock(survivor, timeout=10, auto_renew=False)
        assert other.acquire(blocking=False)
        other.release()
        # ... served while the failed slots had no primary (a replica takes over only after
        # an election delay of half a second or more).
        assert _new_primary(on_cluster, key, old.port) is None
        # Calls on the failed slots answer within their bounds, held or refused.
        began = time.monotonic()
        with contextlib.suppress(LockUnavailable):
            lock(victim, blocking=False, timeout=1, auto_renew=False).acquire()

        async def attempt() -> None:
            with contextlib.suppress(LockUnavailable):
                await lock(victim, blocking=False, timeout=1, auto_renew=False).aacquire()

        asyncio.run(attempt())
        assert time.monotonic() - began < 10
        new = wait_until(lambda: _new_primary(on_cluster, key, old.port), timeout=20, step=0.1)
        assert new.port != old.port
        with contextlib.suppress(LockError):  # replicated before the crash, or lost with it
            held.release()
        # The same process takes the failed slots' locks again, and a waiter is woken.
        again = wait_until(lambda: _taken(victim), timeout=10, step=0.1)
        waiting = lock(victim, blocking_timeout=5, auto_renew=False)
        result = start(lambda: (waiting.acquire(), time.monotonic()))
        wait_until(lambda: server_backend().client.zcard(keys(victim).queue))
        released = time.monotonic()
        again.release()
        got, at = result.result(10)
        assert got is True
        assert at - released < 1
        waiting.release()

        async def main() -> int:  # async code too, through its own cluster client
            async with lock(victim, timeout=10, auto_renew=False):
                return holder_of(on_cluster, victim)

        assert asyncio.run(main()) == new.port
    finally:
        on_cluster.restart(old)


def _new_primary(cluster: ClusterTopology, key: str, old_port: int) -> Any:
    try:
        server = cluster.primary_of(key)
    except RuntimeError:
        return None
    return server if server.port != old_port else None


def _taken(name: str) -> Any:
    held = lock(name, timeout=10, auto_renew=False)
    try:
        return held if held.acquire(blocking=False) else None
    except LockUnavailable:
        return None


def test_checks_know_the_cluster_cache(cluster: ClusterTopology) -> None:
    from django.core.checks import run_checks

    def ids(caches: dict[str, Any], **lock_settings: Any) -> list[str]:
        settings = {"CACHE": "default", **lock_settings}
        with override_settings(CACHES=caches, REDIS_LOCK=settings):
            return sorted(
                str(message.id)
                for message in run_checks(tags=["caches"])
                if str(message.id).startswith("django_redis_lock.")
            )

    caches = cluster_caches(cluster.url)
    assert ids(caches) == []
    assert ids(caches, WAIT_REPLICAS=1) == ["django_redis_lock.E010"]
    retrying = {"socket_timeout": 1, "retry": Retry(NoBackoff(), 2)}
    caches["default"]["OPTIONS"] = {"BASE_CLIENT_KWARGS": retrying}
    assert ids(caches) == ["django_redis_lock.W004"]  # async locks cannot retry alike
    caches["default"]["OPTIONS"] = {"SOCKET_TIMEOUT": 1}  # ignored by the cluster cache
    assert ids(caches) == ["django_redis_lock.W007"]


@pytest.mark.django_db
@pytest.mark.urls("tests.urls")
def test_unreachable_cluster_locked_view_answers_503_not_500(admin_client: Client) -> None:
    # A cluster client connects as it is made: the lock's construction meets the outage.
    with override_settings(CACHES=cluster_caches("valkey://127.0.0.1:1")):
        assert admin_client.get("/pay/7/").status_code == 503


@pytest.mark.django_db
def test_unreachable_cluster_admin_answers_503_not_500(admin_client: Client) -> None:
    with override_settings(CACHES=cluster_caches("valkey://127.0.0.1:1")):
        assert admin_client.get(CHANGELIST).status_code == 503
        assert admin_client.get(CHANGELIST + "any/change/").status_code == 503


def test_a_cursor_of_slots_no_primary_starts_at_is_refused(on_cluster: ClusterTopology) -> None:
    # Cursors name a primary by the first slot it serves (0, 5461, 10923 here): a cursor
    # naming another slot is of a cluster whose slots moved since.
    with pytest.raises(ValueError, match="first page"):
        get_lock_manager().page(cursor="1-0")


def test_statistics_live_beside_each_lock_and_are_read_from_every_primary(
    on_cluster: ClusterTopology,
) -> None:
    names = [f"stats:{i}" for i in range(12)]  # spread over the three primaries
    for name in names:
        with lock(name):
            pass
    ports = set()
    for name in names:
        server = on_cluster.primary_of(keys(name).lock)
        assert on_cluster.primary_of(keys(name).stats) == server  # the lock's hash tag
        ports.add(server.port)
    assert len(ports) > 1
    found = get_lock_manager().stats("stats:*")
    assert [stats.name for stats in found] == sorted(names)
    assert all(stats.acquisitions == 1 for stats in found)
    one = get_lock_manager().get_stats(names[3])
    assert one is not None
    assert one.acquisitions == 1


def test_the_doctor_asks_every_primary(on_cluster: ClusterTopology) -> None:
    status, findings, _ = doctor()
    assert status == 0
    reachable = [finding for finding in findings if finding["check"] == "reachable"]
    assert len(reachable) == 3
    assert {finding["level"] for finding in reachable} == {"ok"}
    coverage = [finding for finding in findings if finding["check"] == "full-coverage"]
    assert [finding["level"] for finding in coverage] == ["ok"] * 3  # the module turned it off
    first = on_cluster.primaries()[0]
    call(first.host, first.port, "CONFIG", "SET", "cluster-require-full-coverage", "yes")
    try:
        _, findings, _ = doctor()
    finally:
        call(first.host, first.port, "CONFIG", "SET", "cluster-require-full-coverage", "no")
    warned = [
        f["subject"] for f in findings if f["check"] == "full-coverage" and f["level"] != "ok"
    ]
    assert warned == [f"127.0.0.1:{first.port} (cache 'default')"]
    assert "replicas" not in levels(findings)  # a cluster refuses WAIT_REPLICAS


def test_semaphores_and_read_write_locks_on_every_primary(on_cluster: ClusterTopology) -> None:
    from django_redis_lock import rwlock, semaphore

    names = [f"pool:{i}" for i in range(12)]  # spread over the primaries by their hash tags
    holders = [semaphore(name, 2) for name in names for _ in range(2)]
    for held in holders:
        assert held.acquire(blocking=False)
    assert not semaphore(names[0], 2).acquire(blocking=False)
    listed = get_lock_manager().list("pool:*")
    assert sorted(info.name for info in listed) == sorted(names * 2)
    assert get_lock_manager().clear("pool:*") == 24
    with rwlock("cluster:doc").write() as writer:
        assert writer.fencing_token is not None
        assert not rwlock("cluster:doc").read().acquire(blocking=False)


def test_a_leadership_leads_hands_over_and_is_deposed(
    on_cluster: ClusterTopology, driver: SyncDriver
) -> None:
    leads_hands_over_and_is_deposed(driver, "cluster")


def test_rate_limits_on_every_primary(on_cluster: ClusterTopology, driver: Any) -> None:
    from django_redis_lock import rate_limit

    admits_rate_and_burst_then_refuses(driver, "cluster:rate")
    waiters_get_distinct_turns_in_order(driver, "cluster:rate-queue")
    names = spread_names(on_cluster, "rate:", 2)  # a rate limit's keys share its name's tag
    for name in names:
        limit = rate_limit(name, "1/m", burst=1)
        admitted = [driver.call(limit, "acquire", False) for _ in range(3)]
        assert admitted == [True, True, False], name
    state = {name: runtime().backend().rate_keys_for(name)[0] for name in names}
    ports = set()
    for name, key in state.items():
        server = on_cluster.primary_of(key)
        with valkey.Valkey(server.host, server.port) as client:
            assert client.exists(key), name
        ports.add(server.port)
    assert len(ports) == 3


@pytest.mark.usefixtures("on_cluster")
def test_cache_once_fills_once_on_the_cluster() -> None:
    assert stampede("cluster:fill", 3) == ["v"] * 4
    assert stats_of("cluster:fill").avoided == 3
