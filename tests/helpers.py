"""Small tools shared by the tests: bounded waits and round-trip counting."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.test.utils import override_settings

from django_redis_lock import Lock, lock
from testproject.settings import build_caches


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, step: float = 0.005) -> Any:
    """The first truthy value of ``predicate()``, checked until ``timeout`` seconds pass.

    Only for conditions that come with the passing of time (a lease running out), where there
    is no event to wait on.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)


class CountingConnection(redis.Connection):
    """A redis-py connection that counts the requests it sends (each one a round trip)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


@contextlib.contextmanager
def counted_caches(url: str) -> Iterator[None]:
    """CACHES whose "default" and "builtin" aliases count their round trips.

    They use database 2: django-redis keeps one pool per URL for the whole process, so a
    URL of their own makes sure their pool is built with the counting connection.
    """
    caches = build_caches(urlunsplit(urlsplit(url)._replace(path="/2")))
    caches["default"]["OPTIONS"]["CONNECTION_POOL_KWARGS"] = {
        "connection_class": CountingConnection
    }
    caches["builtin"]["OPTIONS"]["connection_class"] = CountingConnection
    with override_settings(CACHES=caches):
        yield


@contextlib.contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts the round trips of CountingConnection inside the block into ``result[0]``."""
    result = [0]
    before = CountingConnection.sent
    yield result
    result[0] = CountingConnection.sent - before


def commandstats(client: redis.Redis) -> dict[str, int]:
    """Calls per command name since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


def hold(*names: str, **options: Any) -> list[Lock]:
    """Acquire a lock for each name (not auto-renewed, 60 s unless told otherwise)."""
    options = {"timeout": 60, "auto_renew": False, **options}
    held = [lock(name, **options) for name in names]
    for each in held:
        assert each.acquire(blocking=False), each.name
    return held
