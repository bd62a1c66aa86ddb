"""REDIS_LOCK["WAIT_REPLICAS"]: no holder learns of a grant before replicas acknowledged it.

One primary with one replica, started for this module; a replica paused with SIGSTOP stands
for one that cannot acknowledge (down, or cut off from the primary).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

import pytest
import redis
from django.core.checks import run_checks
from django.test.utils import override_settings

from django_redis_lock import Lock, LockNotReplicated, lock
from testproject.redis_server import RedisServer, RedisServerGroup, find_redis_server
from tests.docs.examples import SENTINELS, example_settings
from tests.helpers import (
    CountingConnection,
    SyncDriver,
    builtin_cache_with,
    commandstats,
    keys,
    listen,
    round_trips,
    start,
    wait_until,
)

# Short, so that a shortfall shows quickly; a healthy replica answers well within it.
WAIT_TIMEOUT = 1.0


class Pair(NamedTuple):
    primary: RedisServer
    replica: RedisServer


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    group = RedisServerGroup(binary=find_redis_server())
    try:
        primary = group()
        replica = group.replica(primary)
        client = redis.Redis(port=primary.port)  # acknowledging, not only synced, first
        wait_until(lambda: client.execute_command("WAIT", 1, 1000) == 1, timeout=10)
        yield Pair(primary, replica)
    finally:
        group.stop_all()


@contextlib.contextmanager
def replicated(
    pair: Pair,
    needed: int = 1,
    *,
    auto_renew: bool = False,
    **options: Any,
) -> Iterator[str]:
    """A fresh alias on the pair's primary whose locks wait for ``needed`` replicas."""
    redis_lock = {"WAIT_REPLICAS": needed, "WAIT_TIMEOUT": WAIT_TIMEOUT, "AUTO_RENEW": auto_renew}
    with contextlib.ExitStack() as stack:
        alias = stack.enter_context(builtin_cache_with(pair.primary.url, **options))
        stack.enter_context(override_settings(REDIS_LOCK={**redis_lock, "CACHE": alias}))
        redis.Redis(port=pair.primary.port).flushall()
        yield alias


@contextlib.contextmanager
def paused(server: RedisServer) -> Iterator[None]:
    server.pause()
    try:
        yield
    finally:
        server.resume()


def _acquired(driver: SyncDriver, name: str) -> Any:
    held = lock(name)
    assert driver.acquire(held)
    return held


def _replica_has(pair: Pair, name: str) -> bool:
    return bool(redis.Redis(port=pair.replica.port).hget(keys(name).lock, "s"))


def test_a_grant_is_on_the_replica_when_acquire_returns(pair: Pair, driver: SyncDriver) -> None:
    with replicated(pair):
        driver.release(_acquired(driver, "warm-up"))  # the script known: then count
        primary = redis.Redis(port=pair.primary.port)
        primary.config_resetstat()
        held = lock("replicated")
        assert driver.acquire(held)
        assert commandstats(primary).get("wait") == 1
        assert _replica_has(pair, "replicated")
        assert driver.owned(held)
        driver.release(held)


def test_wait_adds_no_round_trip(pair: Pair) -> None:
    with replicated(pair, connection_class=CountingConnection):
        with lock("counted"):  # connected, and the script known: then count
            pass
        held = lock("counted")
        with round_trips() as sent:
            assert held.acquire()
        assert sent[0] == 1  # WAIT rides in the same round trip as the script
        held.release()


def test_a_shortfall_gives_the_hold_back(pair: Pair, driver: SyncDriver) -> None:
    with replicated(pair, needed=2):
        held = lock("short")
        with pytest.raises(LockNotReplicated, match=r"1 of the 2 replicas.*given back") as raised:
            driver.acquire(held)
        assert (raised.value.acknowledged, raised.value.needed) == (1, 2)
        assert held.fencing_token is None
        assert not driver.locked(lock("short"))


def test_a_paused_replica_fails_the_acquire_and_the_lock_stays_free(
    pair: Pair, driver: SyncDriver
) -> None:
    with replicated(pair):
        with paused(pair.replica):
            with pytest.raises(LockNotReplicated, match="0 of the 1 replicas"):
                driver.acquire(lock("paused"))
            assert not driver.locked(lock("paused"))
        assert driver.acquire(lock("paused"))


def test_an_extend_not_acknowledged_raises(pair: Pair, driver: SyncDriver) -> None:
    with replicated(pair):
        held = lock("extend", timeout=10)
        assert driver.acquire(held)
        with paused(pair.replica), pytest.raises(LockNotReplicated, match="extend"):
            driver.extend(held, 20)
        driver.extend(held, 20)  # acknowledged again once the replica is back
        assert (driver.ttl(held) or 0) > 20
        driver.release(held)


def _queued(pair: Pair, name: str) -> bool:
    return bool(redis.Redis(port=pair.primary.port).exists(keys(name).queue))


@contextlib.contextmanager
def waiting_behind(pair: Pair, name: str) -> Iterator[tuple[Lock, Lock, Future[bool]]]:
    """A holder of ``name``, and a waiter queued behind it whose grant will be heard."""
    with replicated(pair) as alias:
        listen(alias, pair.primary.url)  # the grant is heard, not found by looking again
        holder = lock(name)
        assert holder.acquire()
        waiter = lock(name, blocking_timeout=10)
        got = start(waiter.acquire)
        wait_until(lambda: _queued(pair, name))
        yield holder, waiter, got


def test_a_hand_over_is_confirmed_by_the_replica(pair: Pair) -> None:
    with waiting_behind(pair, "handed") as (holder, waiter, got):
        holder.release()
        assert got.result(timeout=10)
        assert waiter.owned()
        assert _replica_has(pair, "handed")
        waiter.release()


def test_a_hand_over_not_acknowledged_is_given_back_not_left_waiting(pair: Pair) -> None:
    with waiting_behind(pair, "unconfirmed") as (holder, waiter, got):
        with paused(pair.replica):
            holder.release()  # hands the lock over on the primary alone
            with pytest.raises(LockNotReplicated, match="0 of the 1 replicas"):
                got.result(timeout=5)
        assert waiter.fencing_token is None
        assert not lock("unconfirmed").locked()


def test_checks_report_missing_replicas_and_bad_settings(pair: Pair) -> None:
    with replicated(pair, needed=2):
        found = {message.id: message.msg for message in run_checks(tags=["caches"])}
        assert "django_redis_lock.W005" in found
        assert "has 1 connected replica" in found["django_redis_lock.W005"]
    with replicated(pair, needed=1):
        assert "django_redis_lock.W005" not in {
            message.id for message in run_checks(tags=["caches"])
        }
    for bad in ({"WAIT_REPLICAS": -1}, {"WAIT_REPLICAS": True}, {"WAIT_TIMEOUT": 0}):
        with override_settings(REDIS_LOCK=bad):
            ids = [message.id for message in run_checks(tags=["caches"])]
            assert ids.count("django_redis_lock.E011") == 1
            assert "django_redis_lock.E010" not in ids


def test_a_sentinel_alias_without_wait_replicas_is_warned_about() -> None:
    # The documentation's Sentinel setup, with no sentinel to answer.
    caches = example_settings("settings_sentinel_builtin", {SENTINELS: '[("127.0.0.1", 1)]'})
    with override_settings(CACHES=caches["CACHES"]):
        with override_settings(REDIS_LOCK={}):
            assert "django_redis_lock.W006" in {
                message.id for message in run_checks(tags=["caches"])
            }
        with override_settings(REDIS_LOCK={"WAIT_REPLICAS": 1}):
            assert "django_redis_lock.W006" not in {
                message.id for message in run_checks(tags=["caches"])
            }


def test_a_hold_whose_renewals_are_not_acknowledged_is_lost_and_given_back(pair: Pair) -> None:
    with replicated(pair, auto_renew=True):
        held = lock("renewed", timeout=4)
        assert held.acquire()
        with paused(pair.replica):
            # Each renewal lengthens the lease on the primary, but none counts: the hold is
            # lost when the lease it had ends, and the primary's copy is given back then
            # rather than a full timeout after the last renewal.
            wait_until(lambda: held.lost, timeout=10)
            wait_until(lambda: not lock("renewed").locked(), timeout=0.5)
