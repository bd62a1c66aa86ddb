"""The kit's pytest plugin in a user's project: real pytest runs of a small Django project
that lists it in its conftest.py, with pytest-django and without, and what is left after them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.testing.pytest_runs import (
    RUN_SECONDS,
    alive,
    environment,
    pytest_command,
    run_pytest,
    write_project,
)

pytestmark = pytest.mark.slow


def _text(source: str) -> str:
    return textwrap.dedent(source).lstrip()


PROJECT = {
    "settings.py": _text(
        """
        SECRET_KEY = "only for these tests"
        INSTALLED_APPS = [
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django_redis_lock",
            "shop",
        ]
        DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
        ROOT_URLCONF = "shop.urls"
        ALLOWED_HOSTS = ["testserver"]
        USE_TZ = True
        # Nothing listens here: the plugin points the caches at its own server.
        CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "redis://127.0.0.1:9/0",
            }
        }
        """
    ),
    "conftest.py": 'pytest_plugins = ["django_redis_lock.testing.pytest"]\n',
    "shop/__init__.py": "",
    "shop/models.py": _text(
        """
        from django.db import models

        from django_redis_lock import FencedModelMixin, FencedQuerySet, FenceField


        class Account(FencedModelMixin, models.Model):
            balance = models.IntegerField(default=0)
            fence = FenceField()

            objects = FencedQuerySet.as_manager()
        """
    ),
    "shop/views.py": _text(
        """
        from django.http import HttpResponse

        from django_redis_lock import locked


        @locked("invoice:{invoice_id}")
        def pay(request, invoice_id):
            return HttpResponse("paid")
        """
    ),
    "shop/urls.py": _text(
        """
        from django.urls import path

        from shop.views import pay

        urlpatterns = [path("pay/<int:invoice_id>/", pay)]
        """
    ),
    "shop/jobs.py": _text(
        """
        from django_redis_lock import lock


        def import_all(rows, import_row):
            # Stops at the first row after the lock was lost; the exit says so (LockNotOwned).
            with lock("import", timeout=60) as held:
                for row in rows:
                    if held.lost:
                        break
                    import_row(row)
        """
    ),
    "test_views.py": _text(
        """
        from django.test import Client


        def test_a_busy_invoice_answers_423(locks):
            locks.make_busy("invoice:7")
            assert Client().post("/pay/7/").status_code == 423


        def test_the_next_test_finds_it_free(locks):
            locks.assert_not_held("invoice:7")
            assert Client().post("/pay/7/").status_code == 200
        """
    ),
    "test_jobs.py": _text(
        """
        import pytest

        from django_redis_lock import LockNotOwned
        from shop.jobs import import_all


        def test_the_import_stops_when_its_lock_expires(locks):
            imported = []

            def import_row(row):
                imported.append(row)
                if row == 2:
                    locks.expire_now("import")

            with pytest.raises(LockNotOwned):
                import_all(range(10), import_row)
            assert imported == [0, 1, 2]
        """
    ),
    "test_fencing.py": _text(
        """
        import pytest
        from django.db.models import F

        from django_redis_lock import StaleFencingToken, fenced_update, lock
        from shop.models import Account


        @pytest.mark.django_db
        def test_a_stale_holder_cannot_write(locks):
            account = Account.objects.create(balance=100)
            held = lock("account")
            held.acquire()
            locks.advance_fence("account")
            with pytest.raises(StaleFencingToken):
                fenced_update(Account.objects.filter(pk=account.pk), held, balance=F("balance") - 1)
            account.refresh_from_db()
            assert account.balance == 100
        """
    ),
    "test_server.py": _text(
        """
        import os
        import time

        from tests_runs import redis_server_pid


        def test_write_the_server_pid(redis_lock_server):
            pid = redis_server_pid(redis_lock_server.url)
            assert pid is not None
            with open(os.environ["PID_FILE"], "w") as file:
                file.write(str(pid))
            if os.environ.get("THEN") == "fail":
                raise AssertionError("failing on purpose")
            if os.environ.get("THEN") == "hang":  # until the outer test kills this run
                time.sleep(60)
        """
    ),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The small project, and this suite's /proc reader beside it (as ``tests_runs``)."""
    write_project(tmp_path, PROJECT)
    helpers = Path(__file__).with_name("pytest_runs.py").read_text()
    (tmp_path / "tests_runs.py").write_text(helpers)
    return tmp_path


def _server_pid(project: Path) -> int:
    pid = int((project / "pid").read_text())
    assert pid > 0
    return pid


def _passed(result: subprocess.CompletedProcess[str], count: int) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{count} passed" in result.stdout


def test_with_pytest_django_each_hook_works_and_no_server_is_left(project: Path) -> None:
    result = run_pytest(project, "-p", "django", PID_FILE=str(project / "pid"))
    _passed(result, 5)
    assert not alive(_server_pid(project))


def test_without_pytest_django_too(project: Path) -> None:
    (project / "test_fencing.py").unlink()  # no test database without pytest-django
    result = run_pytest(project, "-p", "no:django", PID_FILE=str(project / "pid"))
    _passed(result, 4)
    assert not alive(_server_pid(project))


def test_a_failing_test_leaves_no_server(project: Path) -> None:
    result = run_pytest(project, "test_server.py", PID_FILE=str(project / "pid"), THEN="fail")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failing on purpose" in result.stdout
    assert not alive(_server_pid(project))


def test_a_killed_run_leaves_no_server(project: Path) -> None:
    pid_file = project / "pid"
    env = environment(project, "settings", PID_FILE=str(pid_file), THEN="hang")
    with subprocess.Popen(
        pytest_command("test_server.py"),
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as run:
        try:
            wait_until(lambda: pid_file.exists() and pid_file.read_text(), timeout=RUN_SECONDS)
            server = _server_pid(project)
            assert alive(server)
        finally:
            os.kill(run.pid, signal.SIGKILL)
            run.wait(timeout=RUN_SECONDS)
    wait_until(lambda: not alive(server), timeout=10)
