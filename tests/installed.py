"""An installed django-redis-lock, run as a user's project runs it: `python3 dev.py package`
installs the wheel in a clean virtualenv (Django and redis-py only: no django-redis, no test
tools) and runs this script there, outside the repository, with a redis-server it starts.

It checks that the package imported is the installed one, that the app needs no cache library
beyond Django's own RedisCache, and that every surface works: the system checks, a lock (sync
and async), @locked, the manager, ``manage.py locks`` and the admin.

Usage: python installed.py REDIS_SERVER_BINARY
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType


def _redis_server_module() -> ModuleType:
    """testproject/redis_server.py (standard library only), loaded from its file, so that the
    repository never comes on sys.path (it would shadow the installed package)."""
    path = Path(__file__).resolve().parent.parent / "testproject" / "redis_server.py"
    spec = importlib.util.spec_from_file_location("redis_server", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["redis_server"] = module
    spec.loader.exec_module(module)
    return module


def configure(url: str) -> None:
    """A minimal project: the admin, this app and Django's own Redis cache."""
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        SECRET_KEY="installed-check",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django_redis_lock",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": url,
                "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
            }
        },
        USE_TZ=True,
    )
    django.setup()


urlpatterns: list[object] = []


def check(url: str) -> None:
    """Every surface of the installed package, against the server at ``url``."""
    configure(url)
    from django.contrib import admin
    from django.contrib.auth import get_user_model
    from django.core.checks import run_checks
    from django.core.management import CommandError, call_command
    from django.test import Client
    from django.urls import path

    import django_redis_lock
    from django_redis_lock import LockBusy, get_lock_manager, lock, locked

    urlpatterns.append(path("admin/", admin.site.urls))
    installed = Path(django_redis_lock.__file__).resolve()
    assert Path(sys.prefix).resolve() in installed.parents, f"not the installed one: {installed}"
    assert importlib.util.find_spec("django_redis") is None, "django-redis should not be needed"
    messages = [
        m for m in run_checks(tags=["caches"]) if m.id and m.id.startswith("django_redis_lock")
    ]
    assert messages == [], messages

    with lock("installed:sync", label="smoke") as held:
        first = held.fencing_token
        assert first is not None
        assert lock("installed:sync").acquire(blocking=False) is False
        names = [info.name for info in get_lock_manager().list("installed:*")]
        assert names == ["installed:sync"], names

    @locked("installed:job:{n}")
    def job(n: int) -> bool:
        return lock(f"installed:job:{n}").locked()

    assert job(1) is True
    with lock("installed:job:2"), contextlib.suppress(LockBusy):
        job(2)
        raise AssertionError("@locked ran while its lock was held")

    async def in_async() -> int | None:
        async with lock("installed:sync") as again:
            return again.fencing_token

    second = asyncio.run(in_async())
    assert second is not None
    assert second > first, (first, second)

    call_command("migrate", verbosity=0, interactive=False)
    user = get_user_model().objects.create_superuser("admin", password="installed-pass")
    client = Client()
    client.force_login(user)
    with lock("installed:admin", label="seen in the admin"):
        page = client.get("/admin/django_redis_lock/lock/")
        assert page.status_code == 200, page.status_code
        assert "installed:admin" in page.content.decode()
        out = io.StringIO()
        call_command("locks", "list", "--json", stdout=out)
        assert [entry["name"] for entry in json.loads(out.getvalue())] == ["installed:admin"]
    stats = client.get("/admin/django_redis_lock/lock/stats/")
    assert stats.status_code == 200, stats.status_code
    out = io.StringIO()
    # A private server that keeps nothing on disk: the doctor may call that an error.
    with contextlib.suppress(CommandError):
        call_command("locks", "doctor", "--json", stdout=out)
    found = {finding["check"]: finding["level"] for finding in json.loads(out.getvalue())}
    assert found["reachable"] == "ok", found
    print(f"installed.py: the django_redis_lock installed in {installed.parent.parent} works")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    redis_server = _redis_server_module()
    with redis_server.RedisServer(binary=argv[0]) as server:
        check(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
