"""The wake-up listener across a Redis restart: quiet when nobody waits, one warning per
outage when somebody does, and a line when it is back."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from django_redis_lock import lock
from django_redis_lock.runtime import runtime
from testproject.redis_server import RedisServer
from tests.helpers import keys, listen, start, wait_until

pytestmark = pytest.mark.slow


def _listener_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.levelno == level and "wake-up channel" in record.getMessage()
    ]


def test_no_waiter_no_reconnects_and_no_warning(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    listen()
    channel = runtime().one_listener(runtime().backend()).channel
    caplog.set_level(logging.DEBUG, logger="django_redis_lock")
    redis_server.kill()
    redis_server.start()
    # Nobody waits: the listener ends instead of reconnecting (it would within its longest
    # backoff, half a second) and says nothing.
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 1.0)
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.pubsub_numsub(channel)[0][1] == 0
    assert not _listener_records(caplog, logging.WARNING)
    assert not _listener_records(caplog, logging.DEBUG)
    # The next waiter starts it again.
    listen()


def test_one_warning_per_outage_while_waiting(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_redis_lock")
    holder = lock("outage", timeout=30, auto_renew=False)  # lost with the restart
    assert holder.acquire()
    queued = threading.Event()
    waiting = lock("outage", blocking_timeout=20, auto_renew=False)

    def wait() -> bool:
        queued.set()
        return waiting.acquire()

    result = start(wait)
    assert queued.wait(5)
    # Queued in Redis: its ticket is registered with the listener right after that reply.
    with redis.Redis.from_url(redis_server.url) as client:
        wait_until(lambda: client.zcard(keys("outage").queue))
    redis_server.kill()
    # Several reconnects fail (at most 0.5 s apart), and each says so at debug level only.
    wait_until(lambda: len(_listener_records(caplog, logging.DEBUG)) >= 3, timeout=10)
    redis_server.start()
    wait_until(lambda: _listener_records(caplog, logging.INFO), timeout=5)
    assert len(_listener_records(caplog, logging.WARNING)) == 1
    # Back, the listener made the waiter look again: the restarted Redis has no lock left.
    assert result.result(10)
    waiting.release()
