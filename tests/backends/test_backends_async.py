"""The asyncio client of a cache alias: built from the cache's own client, refusing what
asyncio cannot do alike instead of dropping it."""

from __future__ import annotations

import asyncio

import pytest
import redis
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redis_lock import lock
from tests.helpers import FaultyConnection, builtin_cache_with


def _async_round(alias: str) -> bool:
    async def main() -> bool:
        held = lock("async-options", using=alias, auto_renew=False)
        taken = await held.aacquire(blocking=False)
        await held.arelease()
        return taken

    return asyncio.run(main())


def _w004(alias: str) -> list[str]:
    return [
        m.msg
        for m in run_checks(tags=["caches"])
        if m.id == "django_redis_lock.W004" and alias in m.msg
    ]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"connection_class": FaultyConnection}, "connection_class=FaultyConnection"),
        ({"retry": Retry(NoBackoff(), 2)}, "retry"),
    ],
)
def test_options_asyncio_cannot_carry_are_refused_not_dropped(
    redis_url: str, options: dict[str, object], named: str
) -> None:
    with builtin_cache_with(redis_url, **options) as alias:
        held = lock("async-options", using=alias, auto_renew=False)
        assert held.acquire(blocking=False)  # sync locks use the cache's own client
        held.release()
        with pytest.raises(ImproperlyConfigured, match=named):
            _async_round(alias)
        with override_settings(REDIS_LOCK={"CACHE": alias}):
            assert any(named in message for message in _w004(alias))


def test_options_asyncio_can_carry_are_carried(redis_url: str) -> None:
    carried = {"retry_on_error": [redis.TimeoutError], "client_name": "locks", "socket_timeout": 2}
    with builtin_cache_with(redis_url, **carried) as alias:
        assert _async_round(alias)
        with override_settings(REDIS_LOCK={"CACHE": alias}):
            assert _w004(alias) == []


class ProjectPool(redis.ConnectionPool):
    """A project's own pool class (tracing, say), defined outside redis-py."""


def test_a_pool_subclass_of_the_projects_own_is_known_by_its_library(redis_url: str) -> None:
    with builtin_cache_with(redis_url, pool_class=ProjectPool) as alias:
        assert _async_round(alias)
        with override_settings(REDIS_LOCK={"CACHE": alias}):
            assert _w004(alias) == []
