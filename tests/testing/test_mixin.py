"""RedisLockTestMixin in a real Django test case and a plain unittest one, run in-process."""

from __future__ import annotations

import io
import unittest
from typing import ClassVar

from django.conf import settings
from django.test import SimpleTestCase
from django.test.utils import override_settings

from django_redis_lock import lock
from django_redis_lock.testing import RedisLockTestMixin, held, redis_server


class _Seen:
    urls: ClassVar[list[str]] = []


class _DjangoCase(RedisLockTestMixin, SimpleTestCase):
    __test__ = False  # run by the test below, not collected by pytest

    def test_takes_locks_on_the_shared_server(self) -> None:
        _Seen.urls.append(settings.CACHES["default"]["LOCATION"])
        self.make_busy("report", owner="nightly")
        assert not lock("report").acquire(blocking=False)
        self.assert_held("report", owner="nightly")

    def test_starts_clean(self) -> None:
        self.assert_not_held("report")  # the other test's hold was reset, its keys flushed
        lock("left-over").acquire()


class _UnittestCase(RedisLockTestMixin, unittest.TestCase):
    __test__ = False

    def test_helpers_as_methods(self) -> None:
        with self.captured_locks() as taken, lock("plain"):
            pass
        assert [each.name for each in taken] == ["plain"]


def _run(*cases: type[unittest.TestCase]) -> unittest.TestResult:
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(case) for case in cases)
    return unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)


def test_the_mixin_in_django_and_unittest_cases() -> None:
    before = settings.CACHES
    result = _run(_DjangoCase, _UnittestCase)
    assert result.wasSuccessful(), result.errors + result.failures
    assert result.testsRun == 3
    assert _Seen.urls == [redis_server.shared().url]
    assert before == settings.CACHES  # the class's override ended with it
    with override_settings(**redis_server.shared().settings()):
        assert held("left-over") is None  # flushed after the test
