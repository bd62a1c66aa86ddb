"""The lane: a lock's scripts on connections of their own beside the cache's pool, which must
keep every guarantee of the pool (a dead idle connection replaced, no reply read by the wrong
call, no socket shared with a forked child, the pool's bound kept)."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.core.cache import close_caches
from django.test import override_settings

from django_redis_lock import LockUnavailable, lock
from django_redis_lock.backends.lane import Lane
from testproject.settings import build_caches
from tests.helpers import (
    builtin_cache_with,
    fork_child,
    fork_is_the_point,
    keys,
    server_backend,
    wait_children,
    wait_until,
)

CYCLES = 50


def _lane(alias: str | None = None) -> Lane | None:
    return server_backend(alias).lane


def _cycles(name: str, alias: str | None = None, count: int = CYCLES, reader: Any = None) -> None:
    """``count`` acquire/release cycles, each token checked against the one Redis stored (read
    by ``reader``, else through the cache's pool): a reply read by the wrong call shows as a
    token that is not the lock's."""
    reader = reader or server_backend(alias).client
    for _ in range(count):
        held = lock(name, using=alias)
        assert held.acquire(blocking=False)
        assert held.fencing_token == int(reader.hget(keys(name, using=alias).lock, "t"))
        held.release()


def _on_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def test_lock_calls_go_through_the_lane_on_one_connection_per_thread() -> None:
    lane = _lane()
    assert lane is not None
    lane.close()
    _cycles("lane-one-thread")
    assert lane.made == 1


def test_a_connection_that_died_while_idle_is_replaced(redis_factory: Any) -> None:
    """The client retries nothing by default: without a look before the call, the first call
    after a restart would fail on the dead connection."""
    server = redis_factory()
    with builtin_cache_with(server.url) as alias:
        _cycles("restarted", alias, count=2)
        server.restart()
        _cycles("restarted", alias, count=2)
        lane = _lane(alias)
        assert lane is not None
        assert lane.made == 1


def test_a_reply_that_came_too_late_is_never_read_by_the_next_call(redis_factory: Any) -> None:
    server = redis_factory()
    with builtin_cache_with(server.url, socket_timeout=0.3) as alias:
        _cycles("late", alias, count=1)
        server.pause()  # SIGSTOP: the request waits in the server's socket
        try:
            with pytest.raises(LockUnavailable):
                lock("late", using=alias).acquire(blocking=False)
        finally:
            server.resume()
        # The paused request may run now, its reply going nowhere; the next call reads its own.
        _cycles("late-other", alias, count=1)


def test_threads_share_the_lane_and_each_reads_its_own_replies() -> None:
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            _cycles(f"lane-thread-{index}")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures
    lane = _lane()
    assert lane is not None
    assert 1 <= lane.made <= 7


@fork_is_the_point  # the connection a forked child inherits
def test_a_forked_child_never_uses_its_parents_connections() -> None:
    """A child forked with the lane's connection idle (the runtime makes a child backends of
    its own, so the lane is called directly here): parent and child, at once, each read the
    echo of their own requests."""
    lane = _lane()
    assert lane is not None
    lane.execute_command("PING")  # the parent has a connection in its lane

    def echoes(who: str) -> None:
        for i in range(300):
            assert lane.execute_command("ECHO", f"{who} {i}") == f"{who} {i}".encode()

    pid = fork_child(lambda: echoes("child"))
    echoes("parent")  # meanwhile, on the connection the child was forked with
    assert wait_children([pid]) == [0]


def test_the_pools_bound_bounds_the_lane(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["bounded"] = {
        **caches["default"],
        "LOCATION": _on_db(redis_url, 3),  # django-redis shares a pool per URL
        "OPTIONS": {
            **caches["default"]["OPTIONS"],
            "CONNECTION_POOL_KWARGS": {"max_connections": 2},
        },
    }
    # Three threads at once: two on the lane's connections, one on the pool's (which the look
    # for eviction may also use), and each check on a client of its own.
    gate, failures = threading.Barrier(3), []

    def work(index: int) -> None:
        try:
            reader = redis.Redis.from_url(_on_db(redis_url, 3))
            gate.wait(10)
            _cycles(f"bounded-{index}", "bounded", count=20, reader=reader)
            reader.close()
        except BaseException as exc:
            failures.append(exc)

    with override_settings(CACHES=caches):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        lane = _lane("bounded")
        assert lane is not None
        assert lane.made <= 2
    assert not failures


def test_a_blocking_pool_keeps_every_call_in_the_pool(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["blocking"] = {
        **caches["default"],
        "LOCATION": _on_db(redis_url, 4),  # django-redis shares a pool per URL
        "OPTIONS": {
            **caches["default"]["OPTIONS"],
            "CONNECTION_POOL_CLASS": "redis.BlockingConnectionPool",
        },
    }
    with override_settings(CACHES=caches):
        assert _lane("blocking") is None
        _cycles("blocking", "blocking", count=3)


def test_closing_hangs_up_the_idle_connections(redis_client: redis.Redis) -> None:
    lane = _lane()
    assert lane is not None
    _cycles("lane-closed", count=1)  # the pool's connection (the test's reader) is made
    lane.close()

    def connected() -> set[int]:
        return {int(client["id"]) for client in redis_client.client_list()}

    before = connected()
    _cycles("lane-closed", count=1)
    made = connected() - before  # the lane's, the only connection the cycle had to make
    assert lane.made == len(made) == 1
    lane.close()
    assert lane.made == 0
    # The server drops a client once it has read its hang-up: soon, not always at once.
    wait_until(lambda: not made & connected(), timeout=5)
    _cycles("lane-closed", count=1)  # and makes a new one when called again
    assert lane.made == 1


class _CountedConnects(redis.Connection):
    """Counts the sockets the test's thread tries to open (every way of connecting, in redis-py
    5 to 8, ends in ``_connect``); not the watchdog's, which settles a failed attempt once the
    server answers again and may try at any moment."""

    attempts = 0

    def _connect(self) -> Any:
        if threading.current_thread() is threading.main_thread():
            _CountedConnects.attempts += 1
        return super()._connect()


def test_a_server_that_is_down_costs_one_attempt_to_connect(redis_factory: Any) -> None:
    """A connection the lane makes connects as it sends, once per call: a server that is down
    (or a connect that times out) fails the call after one attempt, not after a look that
    connects and a second connect."""
    server = redis_factory()
    options = {"connection_class": _CountedConnects, "socket_connect_timeout": 0.5}
    with builtin_cache_with(server.url, **options) as alias:
        _cycles("down", alias, count=1)
        lane = _lane(alias)
        assert lane is not None
        lane.close()
        server.stop()
        _CountedConnects.attempts = 0
        with pytest.raises(LockUnavailable):
            lock("down", using=alias).acquire(blocking=False)
        assert _CountedConnects.attempts == 1


def test_a_credential_provider_keeps_every_call_in_the_pool(redis_factory: Any) -> None:
    server = redis_factory()
    # The default user takes any password while it has none (nopass).
    provider = redis.UsernamePasswordCredentialProvider("default", "any")
    with builtin_cache_with(server.url, credential_provider=provider) as alias:
        assert _lane(alias) is None
        _cycles("provided", alias, count=2)


class WatchingClient(redis.Redis):
    """A client whose own ``execute_command`` sees every command, as a project's may."""

    seen: list[Any] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        WatchingClient.seen.append(args[0])
        return super().execute_command(*args, **options)


def test_a_client_whose_commands_are_watched_keeps_every_call_in_the_pool(redis_url: str) -> None:
    """A subclass (or an instrumentation) that replaced execute_command sees the lock's
    scripts: they do not go beside it."""
    caches = build_caches(redis_url)
    caches["watched"] = {
        **caches["default"],
        "LOCATION": _on_db(redis_url, 5),  # django-redis shares a pool per URL
        "OPTIONS": {
            **caches["default"]["OPTIONS"],
            "REDIS_CLIENT_CLASS": f"{__name__}.WatchingClient",
        },
    }
    WatchingClient.seen.clear()
    with override_settings(CACHES=caches):
        assert _lane("watched") is None
        _cycles("watched", "watched", count=2)
    scripts = [command for command in WatchingClient.seen if command in ("EVALSHA", "EVAL")]
    assert len(scripts) >= 4  # two acquires and two releases, at least


@pytest.mark.parametrize("how", ["option", "setting"])
def test_a_cache_that_hangs_up_after_each_request_keeps_every_call_in_the_pool(
    redis_url: str, redis_client: redis.Redis, how: str
) -> None:
    """django-redis's CLOSE_CONNECTION (its option, or DJANGO_REDIS_CLOSE_CONNECTION): the
    project wants no connection kept between requests, the lock's included."""
    caches = build_caches(redis_url)
    options = {**caches["default"]["OPTIONS"]}
    if how == "option":
        options["CLOSE_CONNECTION"] = True
    db = 6 if how == "option" else 7  # a database of each test's own: connections are counted
    caches["closing"] = {**caches["default"], "LOCATION": _on_db(redis_url, db), "OPTIONS": options}

    def connected() -> list[Any]:
        return [client for client in redis_client.client_list() if client["db"] == str(db)]

    with override_settings(CACHES=caches, DJANGO_REDIS_CLOSE_CONNECTION=how == "setting"):
        assert _lane("closing") is None
        _cycles("closing", "closing", count=2)
        assert connected()
        close_caches()  # a request ended: no connection is left on the cache's database
        # The server drops a client once it has read its hang-up: soon, not always at once.
        wait_until(lambda: not connected(), timeout=5)
        _cycles("closing", "closing", count=1)
