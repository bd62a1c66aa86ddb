"""The kit's helpers as methods, once: the pytest plugin's ``locks`` and the test case mixin
both give them so."""

from __future__ import annotations

from django_redis_lock.testing import assertions, hooks
from django_redis_lock.testing.lock_server import RedisLockServer


class KitMethods:
    """:func:`~django_redis_lock.testing.held`, ``assert_held``... as methods."""

    held = staticmethod(assertions.held)
    assert_held = staticmethod(assertions.assert_held)
    assert_not_held = staticmethod(assertions.assert_not_held)
    captured_locks = staticmethod(assertions.captured_locks)
    assert_enqueued_once = staticmethod(assertions.assert_enqueued_once)
    make_busy = staticmethod(hooks.make_busy)
    expire_now = staticmethod(hooks.expire_now)
    pause_renewals = staticmethod(hooks.pause_renewals)
    advance_fence = staticmethod(hooks.advance_fence)


def clean_after_test(server: RedisLockServer) -> None:
    """Undo the kit's hooks (:func:`~django_redis_lock.testing.reset`), then empty the
    server: the next test starts from nothing."""
    hooks.reset()
    server.flush()
