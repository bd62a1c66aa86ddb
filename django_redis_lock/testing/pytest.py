"""The test kit's pytest plugin, opt-in: list it in the root ``conftest.py``::

    pytest_plugins = ["django_redis_lock.testing.pytest"]

It gives two fixtures. ``redis_lock_server`` (session) is the kit's shared redis-server
(started on first use, stopped when the test process ends, even when it is killed), with the
project's ``CACHES`` pointed at it for the session. ``locks`` (function) is the kit's helpers
as methods; after each test that used it, what the kit made busy, paused or advanced is undone
and the server's keys are flushed.

The plugin is not registered through an entry point: installing the package changes no test
run that does not ask for it. It works with pytest-django (whose settings it leaves to it: the
override sits on top of them, for the session, after pytest-django has set Django up) and
without (Django is set up here from ``DJANGO_SETTINGS_MODULE`` when nothing did it first).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_redis_lock import testing
from django_redis_lock.testing import RedisLockServer
from django_redis_lock.testing.methods import KitMethods, clean_after_test


class Locks(KitMethods):
    """What the ``locks`` fixture gives a test: the helpers of :mod:`django_redis_lock.testing`
    as methods (``locks.make_busy("report:7")``, ``locks.assert_held("report:7")``...), and
    the session's server as ``locks.server``."""

    def __init__(self, server: RedisLockServer) -> None:
        self.server = server

    def clean(self) -> None:
        """Undo the kit's hooks, then empty the server: the next test starts from nothing."""
        clean_after_test(self.server)


def _set_up_django() -> None:
    """Django set up, as pytest-django or the project's conftest would have done it."""
    import django
    from django.apps import apps
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    if apps.ready:
        return
    try:
        settings.INSTALLED_APPS  # noqa: B018  (loads the settings, or says what is missing)
    except ImproperlyConfigured as exc:
        raise pytest.UsageError(
            "django_redis_lock.testing.pytest needs Django's settings: set "
            f"DJANGO_SETTINGS_MODULE or call settings.configure() in conftest.py ({exc})"
        ) from exc
    django.setup()


@pytest.fixture(scope="session")
def redis_lock_server() -> Iterator[RedisLockServer]:
    """The kit's shared redis-server, with ``CACHES`` on it for the whole session."""
    from django.test.utils import override_settings

    _set_up_django()
    server = testing.redis_server.shared()
    with override_settings(**server.settings()):
        yield server


@pytest.fixture
def locks(redis_lock_server: RedisLockServer) -> Iterator[Locks]:
    """The kit's helpers as methods; cleaned after the test (kit reset, server flushed)."""
    helpers = Locks(redis_lock_server)
    yield helpers
    helpers.clean()
