"""The test kit: test the code that takes locks against a real, private redis-server.

``redis_server()`` starts one (``redis_server.shared()``: the process's); ``held``,
``assert_held``, ``assert_not_held``, ``captured_locks`` and ``assert_enqueued_once`` read what
is held; ``make_busy``, ``expire_now``, ``pause_renewals`` and ``advance_fence`` play the faults
that code must survive, and ``reset`` ends them. :class:`RedisLockTestMixin` wires it into
Django's test cases; ``pytest_plugins = ["django_redis_lock.testing.pytest"]`` into pytest.
Not imported by ``django_redis_lock`` itself.
"""

from django_redis_lock.testing import server
from django_redis_lock.testing.assertions import (
    Captured,
    assert_enqueued_once,
    assert_held,
    assert_not_held,
    captured_locks,
    held,
)
from django_redis_lock.testing.hooks import (
    Busy,
    advance_fence,
    expire_now,
    make_busy,
    pause_renewals,
    reset,
)
from django_redis_lock.testing.lock_server import RedisLockServer, redis_server
from django_redis_lock.testing.mixin import RedisLockTestMixin

__all__ = [
    "Busy",
    "Captured",
    "RedisLockServer",
    "RedisLockTestMixin",
    "advance_fence",
    "assert_enqueued_once",
    "assert_held",
    "assert_not_held",
    "captured_locks",
    "expire_now",
    "held",
    "make_busy",
    "pause_renewals",
    "redis_server",
    "reset",
    "server",
]
