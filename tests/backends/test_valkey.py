"""Locks on django-valkey's standalone ValkeyCache (valkey-py, a fork of redis-py whose classes
differ): the suite's server reached through it, sync and async, and its errors mapped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import valkey
from django.test.utils import override_settings

from django_redis_lock import LockUnavailable, get_lock_manager, lock
from django_redis_lock.backends.clients import library_of
from tests.helpers import SyncDriver, keys, server_backend, start, wait_until
from tests.rate.scenarios import (
    admits_rate_and_burst_then_refuses,
    waiters_get_distinct_turns_in_order,
)


def valkey_caches(url: str, **options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "django_valkey.cache.ValkeyCache",
            "LOCATION": url.replace("redis://", "valkey://"),
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1, **options},
        }
    }


@pytest.fixture
def on_valkey(redis_url: str) -> Iterator[None]:
    with override_settings(CACHES=valkey_caches(redis_url)):
        yield


@pytest.mark.usefixtures("on_valkey")
def test_locks_wait_and_fence_through_valkey_py(driver: SyncDriver) -> None:
    assert library_of(server_backend().client) is valkey
    holder = lock("valkey:plain", timeout=10, auto_renew=False)
    assert driver.acquire(holder)
    token = holder.fencing_token
    assert token is not None
    waiting = lock("valkey:plain", blocking_timeout=5, auto_renew=False)
    result = start(lambda: (driver.acquire(waiting), time.monotonic()))
    wait_until(lambda: server_backend().client.zcard(keys("valkey:plain").queue))
    released = time.monotonic()
    driver.release(holder)
    got, at = result.result(10)
    assert got is True
    assert at - released < 1  # woken by the hand-over through the listener
    assert (waiting.fencing_token or 0) > token
    assert [info.name for info in get_lock_manager().list("valkey:*")] == ["valkey:plain"]
    driver.release(waiting)


@pytest.mark.usefixtures("on_valkey")
def test_async_client_is_valkey_py() -> None:
    async def main() -> Any:
        async with lock("valkey:async", timeout=10):
            return server_backend().async_client()

    assert library_of(asyncio.run(main())) is valkey


def test_valkey_errors_become_lock_unavailable(driver: SyncDriver) -> None:
    # Nothing listens on port 1: valkey.exceptions.ConnectionError, not a redis-py class.
    with override_settings(CACHES=valkey_caches("valkey://127.0.0.1:1/0")):
        with pytest.raises(LockUnavailable) as raised:
            driver.acquire(lock("valkey:nowhere", blocking=False))
        assert isinstance(raised.value.__cause__, valkey.ValkeyError)
        with pytest.raises(LockUnavailable):
            list(get_lock_manager().list())


@pytest.mark.usefixtures("on_valkey")
def test_rate_limits_through_valkey_py(driver: SyncDriver) -> None:
    admits_rate_and_burst_then_refuses(driver, "valkey:rate")
    waiters_get_distinct_turns_in_order(driver, "valkey:rate-queue")


def test_a_rate_limit_on_an_unreachable_valkey_is_lock_unavailable(driver: Any) -> None:
    from django_redis_lock import rate_limit

    with override_settings(CACHES=valkey_caches("valkey://127.0.0.1:1/0")):
        with pytest.raises(LockUnavailable) as raised:
            driver.call(rate_limit("valkey:nowhere", "1/s"), "acquire", False)
        assert isinstance(raised.value.__cause__, valkey.ValkeyError)
