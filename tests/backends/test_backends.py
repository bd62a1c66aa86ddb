"""The cache backends locks run on: keys, interoperation, Sentinel, and Redis being down."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_redis_lock import LockUnavailable, get_lock_manager, lock
from django_redis_lock.runtime import runtime
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import SyncDriver, keys, wait_until


def _hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (its first non-empty {...})."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start != -1 and end > start + 1 else key


def test_keys_use_the_cache_key_function_and_share_a_hash_tag() -> None:
    for name in ("plain", "{braced}", "}odd{", "star*"):
        keys = runtime().backend().keys_for(name)
        assert keys.lock.startswith("testproject:1:lock:{")
        assert keys.lock.endswith(f":l:{name}")
        assert len({_hash_tag(key) for key in keys.all}) == 1
        assert re.fullmatch(r"[0-9a-f]{12}", _hash_tag(keys.lock))


def test_a_prefix_with_a_brace_still_gives_one_slot(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["KEY_PREFIX"] = "app{v2"
    with override_settings(CACHES=caches):
        keys = runtime().backend().keys_for("job").all
        assert len({_hash_tag(key) for key in keys}) == 1
        with lock("job"):
            assert get_lock_manager().get("job") is not None


def test_version_and_prefix_separate_locks(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["VERSION"] = 2
    held = lock("versioned")
    held.acquire()
    with override_settings(CACHES=caches):
        assert lock("versioned", blocking=False).acquire()  # another VERSION, another lock
    assert not lock("versioned", using="builtin", blocking=False).acquire()
    assert lock("versioned", using="locks_db1", blocking=False).acquire()  # other prefix/db
    held.release()


def test_django_redis_and_builtin_backend_guard_the_same_lock(redis_client: redis.Redis) -> None:
    via_django_redis = lock("shared", using="default")
    via_builtin = lock("shared", using="builtin", blocking_timeout=5)
    assert via_django_redis.acquire()
    assert not lock("shared", using="builtin", blocking=False).acquire()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(via_builtin.acquire()))
    waiter.start()
    queue = keys("shared", using="builtin").queue
    wait_until(lambda: redis_client.zcard(queue) == 1)  # it queued
    via_django_redis.release()  # hands over to the waiter of the other backend, and wakes it
    waiter.join(5)
    assert results == [True]
    assert get_lock_manager("default").get("shared") is not None
    via_builtin.release()


def test_sentinel_client(redis_factory: RedisServerGroup) -> None:
    master = redis_factory()
    sentinel = redis_factory.sentinel(master)
    caches: dict[str, Any] = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://mymaster/0",
            "KEY_PREFIX": "sentinel",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": [(sentinel.host, sentinel.port)],
            },
        }
    }
    with override_settings(CACHES=caches):
        held = lock("via-sentinel")
        assert held.acquire()
        assert redis.Redis(port=master.port).exists(keys("via-sentinel").lock)
        assert not lock("via-sentinel", blocking=False).acquire()
        held.release()
        _check_async_round(lock("via-sentinel"))


def _check_async_round(held: Any) -> None:
    async def main() -> None:
        async with held:
            assert await held.aowned()

    asyncio.run(main())


def test_redis_down_raises_lock_unavailable(
    redis_factory: RedisServerGroup, driver: SyncDriver
) -> None:
    server = redis_factory()
    caches = build_caches(server.url)
    with override_settings(CACHES=caches):
        held = lock("fragile", auto_renew=False)
        assert driver.acquire(held)
        server.stop()
        calls: list[Callable[[], object]] = [
            lambda: driver.release(held),
            lambda: driver.extend(held),
            lambda: driver.locked(held),
            lambda: driver.owned(held),
            lambda: driver.ttl(held),
            lambda: driver.acquire(lock("other")),
            lambda: driver.acquire(lock("other"), blocking=False),
            lambda: list(get_lock_manager().list()),
            lambda: get_lock_manager().get("fragile"),
            lambda: get_lock_manager().release("fragile"),
            lambda: get_lock_manager().clear(),
        ]
        for call in calls:
            with pytest.raises(LockUnavailable) as caught:
                call()
            assert isinstance(caught.value.__cause__, redis.ConnectionError)


def test_a_stalled_redis_raises_lock_unavailable_after_the_socket_timeout(
    redis_factory: RedisServerGroup,
) -> None:
    server = redis_factory()
    caches = build_caches(server.url)
    caches["default"]["OPTIONS"]["SOCKET_TIMEOUT"] = 0.2
    with override_settings(CACHES=caches):
        lock("warm").acquire(blocking=False)  # connect and load the scripts first
        server.pause()
        try:
            with pytest.raises(LockUnavailable) as caught:
                lock("stalled").acquire()
        finally:
            server.resume()
    assert isinstance(caught.value.__cause__, redis.TimeoutError)


def test_a_cache_that_is_not_redis_is_refused() -> None:
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=caches), pytest.raises(ImproperlyConfigured, match="not a Redis"):
        lock("anything")


def test_shard_client_is_refused(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["OPTIONS"]["CLIENT_CLASS"] = "django_redis.client.ShardClient"
    caches["default"]["LOCATION"] = [redis_url]
    with override_settings(CACHES=caches), pytest.raises(ImproperlyConfigured, match="Shard"):
        lock("anything")


def test_unknown_alias_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="not in CACHES"):
        lock("anything", using="nope")


def test_release_failure_does_not_mask_the_blocks_exception(
    redis_factory: RedisServerGroup,
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):

        def body() -> None:
            with lock("masked", auto_renew=False):
                server.stop()
                raise ValueError("the real problem")

        with pytest.raises(ValueError, match="the real problem"):
            body()


def test_clients_of_closed_event_loops_do_not_pile_up(redis_client: redis.Redis) -> None:
    async def cycle() -> None:
        async with lock("per-loop"):
            pass

    asyncio.run(cycle())
    before = len(redis_client.client_list())
    for _ in range(20):
        asyncio.run(cycle())
    assert len(redis_client.client_list()) <= before + 1


def test_django_valkey_is_not_imported_unless_a_cache_uses_it(redis_url: str) -> None:
    # Importing it replaces Django's cache-closing receiver (django-valkey 0.4.0): a project
    # on django-redis that merely has it installed must not get that from the lock.
    script = (
        "import sys, django; django.setup()\n"
        "from django.core.checks import run_checks; run_checks()\n"
        "from django_redis_lock import lock, get_lock_manager\n"
        "with lock('import-check', blocking=False): list(get_lock_manager().list())\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_valkey')))\n"
    )
    env = {**os.environ, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_settings_change_while_a_lock_finds_its_backend_is_not_undone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The REDIS_LOCK CACHE's backend is remembered for every lock() after; one found before a
    change of the settings (another thread's override_settings, say) is not remembered after
    it, or every lock would go on using the old server."""
    found = runtime()
    real = found.backend
    old: list[object] = []

    def backend_then_reset(alias: Any = None) -> Any:
        made = real(alias)
        old.append(made)
        found.reset()  # the settings change between the lookup and the remembering
        return made

    monkeypatch.setattr(found, "backend", backend_then_reset)
    found.reset()
    assert found.for_locks() is old[0]
    monkeypatch.undo()
    fresh = found.for_locks()
    assert fresh is not old[0]
    assert found.for_locks() is fresh  # remembered now: no reset came between
