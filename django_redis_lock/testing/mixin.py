"""RedisLockTestMixin: the test kit for Django's test cases and unittest."""

from __future__ import annotations

import unittest
from typing import TYPE_CHECKING, ClassVar

from django.test.utils import override_settings

from django_redis_lock.testing.lock_server import RedisLockServer, redis_server
from django_redis_lock.testing.methods import KitMethods, clean_after_test

if TYPE_CHECKING:
    _Base = unittest.TestCase
else:
    _Base = object


class RedisLockTestMixin(KitMethods, _Base):
    """For a Django ``TestCase``/``SimpleTestCase`` or a ``unittest.TestCase``: the class's
    tests take their locks on the process's shared redis-server (CACHES overridden for the
    class, as :meth:`RedisLockServer.settings` says), and after each test what the kit made
    busy or paused is reset and the server flushed. ``class ReportTests(RedisLockTestMixin,
    TestCase)``; a ``setUp`` of the class's own calls ``super().setUp()``. The helpers are
    methods too: ``self.assert_held(...)``, ``self.make_busy(...)``..."""

    #: The shared server the class's tests use.
    redis_lock_server: ClassVar[RedisLockServer]

    @classmethod
    def setUpClass(cls) -> None:
        """Start (or reuse) the shared server and point CACHES at it for the class."""
        server = cls.redis_lock_server = redis_server.shared()
        override = override_settings(**server.settings())
        override.enable()
        cls.addClassCleanup(override.disable)
        super().setUpClass()

    def setUp(self) -> None:
        """Have the kit's clean-up run after the test: reset(), then a flush."""
        super().setUp()
        self.addCleanup(self.redis_lock_clean)

    def redis_lock_clean(self) -> None:
        """After each test: :func:`~django_redis_lock.testing.reset`, then flush the server."""
        clean_after_test(self.redis_lock_server)
