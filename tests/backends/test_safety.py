"""Where users run locks (issue 20): a cache Redis that evicts keys drops held locks, and the
product says so: at startup (system check W010, see test_checks.py), at each process's first
lock call (a log line, once per alias), and in ``manage.py locks doctor``."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import pytest
import redis
from django.core.cache import caches
from django.core.checks import run_checks
from django.test.utils import override_settings

from django_redis_lock import lock
from testproject.redis_server import RedisServer, RedisServerGroup
from testproject.settings import build_caches, build_quorum_caches
from tests.helpers import doctor, keys, levels

EVICTING = ("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
# How long a test waits for the warning of the first lock call (logged from a thread).
LOG_SECONDS = 10.0


class Recorder(logging.Handler):
    """The messages of the package's logger that contain ``text``, as they come."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.messages: list[str] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.text in message:
            with self._changed:
                self.messages.append(message)
                self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = LOG_SECONDS) -> list[str]:
        """The messages once there are ``count`` (AssertionError after ``timeout`` s)."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.messages) >= count, timeout), (
                f"{len(self.messages)} of {count} warnings logged"
            )
            return list(self.messages)


@contextlib.contextmanager
def recording(text: str) -> Iterator[Recorder]:
    logger = logging.getLogger("django_redis_lock")
    recorder, level = Recorder(text), logger.level
    logger.addHandler(recorder)
    logger.setLevel(logging.DEBUG)
    try:
        yield recorder
    finally:
        logger.removeHandler(recorder)
        logger.setLevel(level)


@pytest.fixture
def evicting(redis_factory: RedisServerGroup) -> RedisServer:
    """A Redis set up as a cache usually is: a memory limit and an LRU eviction policy."""
    return redis_factory(extra_args=EVICTING)


def test_an_evicting_cache_drops_a_held_lock(evicting: RedisServer) -> None:
    """What the warnings are about, measured: ordinary cache writes evict a held lock's key,
    and a second caller takes the lock while its holder still works."""
    with override_settings(CACHES=build_caches(evicting.url)):
        held = lock("report", timeout=60, auto_renew=False)
        assert held.acquire(blocking=False)
        key = keys("report").lock
        client = redis.Redis(port=evicting.port)
        filler = "x" * 400
        for batch in range(100):  # bounded: 50,000 writes of 400 bytes into 4 MB
            caches["default"].set_many({f"page:{batch}:{i}": filler for i in range(500)})
            if client.pttl(key) == -2:  # PTTL does not touch the key's LRU clock
                break
        assert client.pttl(key) == -2, "the held lock's key survived"
        assert lock("report").acquire(blocking=False)  # a second holder while the first works


def test_the_first_lock_call_of_a_process_warns_once_per_alias(evicting: RedisServer) -> None:
    caches_ = build_caches(evicting.url)
    with recording("may evict keys") as log, override_settings(CACHES=caches_):
        with lock("first"):
            pass
        (first,) = log.wait_for(1)
        assert f"server 127.0.0.1:{evicting.port} of cache 'default'" in first
        assert "maxmemory-policy allkeys-lru" in first
        with lock("second"):  # the same alias: no second probe, no second warning
            pass
        with lock("third", using="locks_db1"):  # another alias on it: its own warning
            pass
        assert [message.split(" may evict")[0] for message in log.wait_for(2)] == [
            f"The Redis server 127.0.0.1:{evicting.port} of cache 'default'",
            f"The Redis server 127.0.0.1:{evicting.port} of cache 'locks_db1'",
        ]


def test_no_warning_for_a_server_that_never_evicts(redis_factory: RedisServerGroup) -> None:
    safe = redis_factory(extra_args=("--maxmemory", "4mb", "--maxmemory-policy", "noeviction"))
    evicting = redis_factory(extra_args=EVICTING)
    caches_ = build_caches(safe.url)
    caches_["locks_db1"] = build_caches(evicting.url)["locks_db1"]
    with recording("evict") as log, override_settings(CACHES=caches_):
        with lock("safe"):
            pass
        with lock("unsafe", using="locks_db1"):
            pass
        said = {message.split("'")[1]: message for message in log.wait_for(2)}
    assert said["default"] == (
        f"The Redis server 127.0.0.1:{safe.port} of cache 'default' never evicts keys."
    )
    assert said["locks_db1"].startswith(
        f"The Redis server 127.0.0.1:{evicting.port} of cache 'locks_db1' may evict keys"
    )


# -- manage.py locks doctor --------------------------------------------------------------------


def test_doctor_on_a_server_that_evicts(evicting: RedisServer) -> None:
    with override_settings(CACHES=build_caches(evicting.url)):
        status, findings, text = doctor()
    assert status == 1
    assert levels(findings) == {
        "reachable": "ok",
        "version": "ok",
        "eviction": "error",
        "persistence": "warning",
        "replicas": "ok",
        "socket-timeout": "ok",
    }
    eviction = next(finding for finding in findings if finding["check"] == "eviction")
    assert eviction["subject"] == f"127.0.0.1:{evicting.port} (cache 'default')"
    assert "maxmemory-policy allkeys-lru" in eviction["message"]
    assert "noeviction" in eviction["fix"]
    assert f"error    eviction        127.0.0.1:{evicting.port} (cache 'default'): " in text
    assert text.rstrip().endswith("6 items: 4 ok, 1 warning, 1 error.")


def test_doctor_on_a_safe_server(redis_factory: RedisServerGroup) -> None:
    safe = redis_factory(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    with override_settings(CACHES=build_caches(safe.url)):
        status, findings, text = doctor("--using", "locks_db1")
    assert status == 0
    assert [f for f in findings if f["level"] != "ok"] == []
    assert "append-only file synced at every write" in " ".join(text.split())  # wrapped
    assert "cache 'locks_db1'" in text


def test_doctor_asks_for_every_replica_and_a_socket_timeout_above_wait_timeout(
    redis_factory: RedisServerGroup,
) -> None:
    primary = redis_factory()
    redis_factory.replica(primary)
    caches_ = build_caches(primary.url)
    caches_["default"] = {**caches_["builtin"], "OPTIONS": {"socket_timeout": 1}}
    options = {"WAIT_TIMEOUT": 1}
    with override_settings(CACHES=caches_):
        with override_settings(REDIS_LOCK={**options, "WAIT_REPLICAS": 0}):
            _, findings, _ = doctor()
            assert levels(findings)["replicas"] == "warning"  # a failover may lose grants
            assert levels(findings)["socket-timeout"] == "ok"
        with override_settings(REDIS_LOCK={**options, "WAIT_REPLICAS": 1}):
            _, findings, _ = doctor()
            assert levels(findings)["replicas"] == "ok"
            assert levels(findings)["socket-timeout"] == "warning"
        with override_settings(REDIS_LOCK={**options, "WAIT_REPLICAS": 2}):
            status, findings, _ = doctor()
            assert (status, levels(findings)["replicas"]) == (1, "error")


def test_the_system_checks_and_the_doctor_say_the_same_of_replicas_and_timeouts(
    redis_factory: RedisServerGroup,
) -> None:
    """One rule, one answer (issue 37): a primary found without Sentinel that has a replica,
    and no WAIT_REPLICAS, is warned about at startup (W006) as the doctor warns of it; with
    WAIT_REPLICAS, a socket timeout WAIT_TIMEOUT leaves no margin is W012 in both."""
    primary = redis_factory()
    redis_factory.replica(primary)
    caches_ = build_caches(primary.url)
    caches_["default"] = {**caches_["builtin"], "OPTIONS": {"socket_timeout": 1}}
    with override_settings(CACHES=caches_):
        for options, check, wanted in (
            ({"WAIT_REPLICAS": 0}, "replicas", "django_redis_lock.W006"),
            ({"WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 1}, "socket-timeout", "django_redis_lock.W012"),
        ):
            with override_settings(REDIS_LOCK=options):
                said = {message.id: message.msg for message in run_checks(tags=["caches"])}
                _, findings, _ = doctor()
            (finding,) = [each for each in findings if each["check"] == check]
            assert finding["level"] == "warning"
            assert said[wanted] == finding["message"]


def test_doctor_on_a_quorum_with_a_primary_down(redis_factory: RedisServerGroup) -> None:
    servers = [redis_factory() for _ in range(3)]
    caches_ = build_quorum_caches([server.url for server in servers])
    servers[2].stop()
    with override_settings(CACHES={**build_caches(servers[0].url), **caches_}):
        status, findings, text = doctor("--using", "quorum0,quorum1,quorum2")
    assert status == 0  # two of three make a majority
    majority = next(finding for finding in findings if finding["check"] == "majority")
    assert majority["level"] == "warning"
    assert "1 of 3 primaries do not answer" in majority["message"]
    down = [f for f in findings if f["check"] == "reachable" and f["level"] != "ok"]
    assert [f["subject"] for f in down] == [f"127.0.0.1:{servers[2].port} (cache 'quorum2')"]
    persistence = [f for f in findings if f["check"] == "persistence"]
    assert len(persistence) == 2
    assert all("longer than the longest lease" in f["fix"] for f in persistence)
    assert text.count("socket-timeout") == 3


def test_each_member_of_a_quorum_is_looked_at(redis_factory: RedisServerGroup) -> None:
    servers = [redis_factory(), redis_factory(extra_args=EVICTING), redis_factory()]
    caches_ = {
        **build_caches(servers[0].url),
        **build_quorum_caches([server.url for server in servers]),
    }
    quorum = {"CACHE": ["quorum0", "quorum1", "quorum2"]}
    with recording("evict") as log, override_settings(CACHES=caches_, REDIS_LOCK=quorum):
        ids = [
            message.id
            for message in run_checks(tags=["caches"])
            if (message.id or "").startswith("django_redis")
        ]
        assert ids == ["django_redis_lock.W010"]
        with lock("quorum-wide"):
            pass
        said = {message.split("'")[1]: message for message in log.wait_for(3)}
    assert sorted(said) == ["quorum0", "quorum1", "quorum2"]
    assert "may evict keys" in said["quorum1"]
    assert "never evicts" in said["quorum0"]
    assert "never evicts" in said["quorum2"]
