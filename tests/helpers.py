"""Small tools shared by the tests: bounded waits and round-trip counting."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.dispatch import Signal
from django.test.utils import override_settings

from django_redis_lock import Lock, lock
from django_redis_lock.runtime import runtime
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


class FaultyConnection(redis.Connection):
    """A redis-py connection that can be told to fail, for real faults on a real server:
    ``lose_reply`` lets the next command reach Redis (which runs it) and loses its reply, as a
    network cut or a timeout would; ``fail_send`` is raised instead of sending anything."""

    lose_reply = False
    fail_send: BaseException | None = None  # raised by every send until cleared

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if FaultyConnection.fail_send is not None:
            raise FaultyConnection.fail_send
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if FaultyConnection.lose_reply:
            FaultyConnection.lose_reply = False
            self.disconnect()  # the reply, already on its way, is never read
            raise redis.TimeoutError("reply lost (injected)")
        return super().read_response(*args, **kwargs)


@contextlib.contextmanager
def builtin_cache_with(url: str, **options: Any) -> Iterator[str]:
    """A "faulty" alias (Django's RedisCache on ``url``) with extra connection ``options``;
    yields the alias. Its pool is its own, so nothing leaks into other tests."""
    caches = build_caches(url)
    caches["faulty"] = {**caches["builtin"], "OPTIONS": {**caches["builtin"]["OPTIONS"], **options}}
    FaultyConnection.lose_reply, FaultyConnection.fail_send = False, None
    try:
        with override_settings(CACHES=caches):
            yield "faulty"
    finally:
        FaultyConnection.lose_reply, FaultyConnection.fail_send = False, None


@contextlib.contextmanager
def received(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of every sending of ``signal`` inside the block."""
    calls: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        calls.append(kwargs)

    signal.connect(receiver, weak=False)
    try:
        yield calls
    finally:
        signal.disconnect(receiver)


def _unread_request_bytes(port: int) -> int:
    """Bytes sent to the server on ``port`` that it has not read yet (Linux: /proc/net/tcp)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01":  # the server's end, established
                    total += int(fields[4].split(":")[1], 16)  # rx_queue
    return total


async def until_redis_has_unread_request(port: int, timeout: float = 5.0) -> None:
    """Return once a request sits unread in a paused server's socket (it will run it on
    resume): the way to know that a call was sent, when no reply can come."""
    deadline = time.monotonic() + timeout
    while not _unread_request_bytes(port):
        if time.monotonic() > deadline:
            raise AssertionError(f"no request reached the server within {timeout} s")
        await asyncio.sleep(0.005)


def forge(client: redis.Redis, name: str, *, key: bytes | str | None = None, **fields: str) -> None:
    """Write a held lock's hash by hand, as anyone who can write to Redis could."""
    key = key or runtime().backend().keys_for(name).lock
    client.hset(key, mapping={"s": "forged", "t": "1", "o": "someone", "a": "1", **fields})
    client.pexpire(key, 60_000)


def listen(alias: str | None = None) -> None:
    """Start this process's listener for grants on ``alias`` and return once Redis has its
    subscription (as after the process's first wait)."""
    listener = runtime().listener(runtime().backend(alias))
    listener.start()
    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        wait_until(lambda: client.pubsub_numsub(listener.channel)[0][1], timeout=5)
