"""The test kit's redis-server: a private one started and stopped cleanly, the settings it
gives, and the shared one, which dies with its process even on SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test.utils import override_settings

from django_redis_lock import get_lock_manager, lock
from django_redis_lock.testing import redis_server
from django_redis_lock.testing.server import ping

ROOT = Path(__file__).resolve().parents[2]
DEATH_SECONDS = 10.0


def _gone(pid: int, timeout: float = DEATH_SECONDS) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def test_started_and_stopped_it_leaves_no_process() -> None:
    with redis_server() as server:
        pid = server.pid
        assert pid is not None
        assert ping(server.host, server.port)
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
    assert server.pid is None
    assert _gone(pid)


def test_its_settings_take_locks_there() -> None:
    server = redis_server().start()
    try:
        caches = server.caches()
        assert caches["default"]["LOCATION"] == server.url
        assert server.settings() == {"CACHES": caches}
        # The suite's settings use django-redis: kept; any other backend can be asked for.
        assert caches["default"]["BACKEND"] == "django_redis.cache.RedisCache"
        builtin = "django.core.cache.backends.redis.RedisCache"
        assert server.caches(builtin)["default"]["BACKEND"] == builtin
        with override_settings(**server.settings()):
            with lock("on-the-kit-server"):
                assert get_lock_manager().get("on-the-kit-server") is not None
            lock("left").acquire()
            server.flush()
            assert get_lock_manager().get("left") is None
    finally:
        server.stop()


def test_an_unknown_backend_gets_djangos_redis_cache() -> None:
    with override_settings(CACHES={"default": {"BACKEND": "x.Cache"}}):
        caches = redis_server.shared().caches()
    assert caches["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"


def test_the_shared_server_is_started_once() -> None:
    shared = redis_server.shared()
    assert shared is redis_server.shared()
    assert shared.running


_SHARED_CHILD = """
import os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
import django
django.setup()
from django_redis_lock.testing import redis_server
print(redis_server.shared().pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_process_leaves_no_shared_server() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _SHARED_CHILD.format(root=str(ROOT))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        assert not _gone(pid, timeout=0.1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=DEATH_SECONDS)
        assert _gone(pid)
    finally:
        child.kill()
        child.wait(timeout=DEATH_SECONDS)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_process_that_exits_stops_its_shared_server() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _SHARED_CHILD.format(root=str(ROOT))],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert _gone(int(child.stdout))
