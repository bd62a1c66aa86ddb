"""Quorum locks over five independent primaries this module starts: the Lock API, fencing
tokens across majorities, primaries killed, frozen and restarted, processes contending."""

from __future__ import annotations

import gc
import html
import importlib.util
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import redis
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test.utils import override_settings

from django_redis_lock import LockUnavailable, get_lock_manager, lock, locked
from django_redis_lock.backends.quorum import QuorumBackend
from django_redis_lock.exceptions import LateGrant
from django_redis_lock.runtime import runtime
from django_redis_lock.scripts import BOUNDS_MS
from django_redis_lock.signals import lock_lost
from testproject.redis_server import RedisServer, RedisServerGroup, find_redis_server
from testproject.topology import SentinelTopology
from tests.helpers import (
    CALL_SECONDS,
    SyncDriver,
    eviction_looked,
    fork_child,
    fork_is_the_point,
    received,
    spawn_child,
    start,
    wait_children,
    wait_for_unread_request,
    wait_until,
)
from tests.leader.scenarios import leads_hands_over_and_is_deposed

PRIMARIES = 5
ALIASES = [f"q{i}" for i in range(PRIMARIES)]
# Short, so that a frozen primary shows quickly; a live one answers well within it.
SOCKET_TIMEOUT = 0.5
# The socket timeout of the late-majority test: its pause must stay well below it.
LATE_SOCKET_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def servers() -> Iterator[list[RedisServer]]:
    group = RedisServerGroup(binary=find_redis_server())
    try:
        yield [group() for _ in range(PRIMARIES)]
    finally:
        group.stop_all()


def quorum_caches(
    servers: list[RedisServer], socket_timeout: float = SOCKET_TIMEOUT, **extra: dict[str, Any]
) -> dict[str, Any]:
    """One alias per primary; every other kind of cache alias locks can use, in turn."""
    caches: dict[str, Any] = {}
    for i, server in enumerate(servers):
        if i % 2:
            caches[f"q{i}"] = {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": server.url,
                "OPTIONS": {
                    "socket_timeout": socket_timeout,
                    "socket_connect_timeout": socket_timeout,
                },
            }
        else:
            caches[f"q{i}"] = {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": server.url,
                "KEY_PREFIX": f"p{i}",
                "OPTIONS": {
                    "SOCKET_TIMEOUT": socket_timeout,
                    "SOCKET_CONNECT_TIMEOUT": socket_timeout,
                },
            }
    caches["default"] = caches["q0"]
    caches.update(extra)
    return caches


@pytest.fixture
def quorum(servers: list[RedisServer]) -> Iterator[list[redis.Redis]]:
    """REDIS_LOCK CACHE is the five aliases; yields a client per primary (flushed)."""
    for server in servers:
        if not server.running:
            server.start()
        elif server.paused:
            server.resume()
    clients = [redis.Redis(port=server.port) for server in servers]
    for client in clients:
        client.flushall()
    with override_settings(
        CACHES=quorum_caches(servers), REDIS_LOCK={"CACHE": ALIASES, "AUTO_RENEW": False}
    ):
        yield clients
    for server in servers:  # a test that stopped one leaves it to be started again
        if server.paused:
            server.resume()


def holds(clients: list[redis.Redis], name: str) -> list[dict[bytes | str, bytes | str]]:
    """The lock hash of ``name`` on each primary (empty where it has none)."""
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    return [
        client.hgetall(member.keys_for(name).lock)
        for client, member in zip(clients, backend.members, strict=True)
    ]


def holders(clients: list[redis.Redis], name: str) -> int:
    return sum(1 for found in holds(clients, name) if b"s" in found)


# -- the Lock API --------------------------------------------------------------------------


def test_a_quorum_lock_is_held_on_every_primary_and_released_from_all(
    quorum: list[redis.Redis], driver: SyncDriver
) -> None:
    held = lock("report", label="nightly")
    assert driver.acquire(held)
    found = holds(quorum, "report")
    assert [bool(found_one.get(b"s")) for found_one in found] == [True] * PRIMARIES
    # one token on all: the primaries granted the proposal (or were raised to the largest)
    assert {found_one[b"t"] for found_one in found} == {str(held.fencing_token).encode()}
    assert {found_one[b"l"] for found_one in found} == {b"nightly"}
    assert all(b"pid" in found_one[b"o"] for found_one in found)
    assert driver.locked(held)
    assert driver.owned(held)
    assert 25 < (driver.ttl(held) or 0) <= 30
    assert not lock("report").acquire(blocking=False)
    driver.release(held)
    assert holders(quorum, "report") == 0
    assert not driver.locked(held)


def test_with_blocks_and_async_with_blocks(quorum: list[redis.Redis], driver: SyncDriver) -> None:
    with driver.entered(lock("block")) as held:
        assert holders(quorum, "block") == PRIMARIES
        assert held.fencing_token is not None
    assert holders(quorum, "block") == 0


def test_busy_when_another_holds_a_majority_even_if_not_all(quorum: list[redis.Redis]) -> None:
    first = lock("partly")
    assert first.acquire()
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    for client, member in list(zip(quorum, backend.members, strict=True))[:2]:
        client.delete(member.keys_for("partly").lock)  # two primaries forgot it
    second = lock("partly")
    assert second.acquire(blocking=False) is False
    assert second.busy_ttl is not None
    assert 25 < second.busy_ttl <= 30
    # the failed attempt gave back what it got on the two primaries
    assert holders(quorum, "partly") == 3
    first.release()
    assert second.acquire(blocking=False)


def test_extend_and_the_watchdog_renew_on_every_primary(quorum: list[redis.Redis]) -> None:
    held = lock("renewed", timeout=1.0, auto_renew=True)
    assert held.acquire()
    held.extend(5)
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    pttls = [
        client.pttl(member.keys_for("renewed").lock)
        for client, member in zip(quorum, backend.members, strict=True)
    ]
    assert all(5000 < pttl <= 6000 for pttl in pttls), pttls
    held.extend(1, replace_ttl=True)
    # the watchdog keeps it past several leases
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert held.owned()
        time.sleep(0.1)
    held.release()


def test_a_hold_confirmed_by_fewer_than_a_majority_is_lost(quorum: list[redis.Redis]) -> None:
    held = lock("shrinking", timeout=1.0, auto_renew=True)
    assert held.acquire()
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    with received(lock_lost) as lost:
        for client, member in list(zip(quorum, backend.members, strict=True))[:3]:
            client.delete(member.keys_for("shrinking").lock)
        wait_until(lambda: lost, timeout=3)
    assert held.lost
    assert [call["fencing_token"] for call in lost] == [held.fencing_token]


def test_waiters_are_woken_by_the_release(quorum: list[redis.Redis], driver: SyncDriver) -> None:
    first = lock("handed", timeout=30)
    assert first.acquire()
    waiter = lock("handed", blocking_timeout=10)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(driver.acquire(waiter)))
    thread.start()
    # the waiter noted itself on the primaries (its process's channel, to be told)
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    member_keys = [member.keys_for("handed") for member in backend.members]
    wait_until(
        lambda: all(
            client.hlen(keys.waiters) for client, keys in zip(quorum, member_keys, strict=True)
        )
    )
    released = time.monotonic()
    first.release()
    thread.join(10)
    # woken, not by the end of the 30 s lease nor its own 10 s limit
    assert got == [True]
    assert time.monotonic() - released < 2
    driver.release(waiter)


# -- fencing tokens across majorities ----------------------------------------------------------


def test_tokens_grow_across_majorities_that_share_one_primary(quorum: list[redis.Redis]) -> None:
    """A's grants disagree (one primary's last token is far ahead), so A's token, the largest,
    is raised on a majority before A returns; B, on another majority, still gets a larger one."""
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    lock_keys = [member.keys_for("fenced").lock for member in backend.members]
    ahead = time.time_ns() // 1000 + 10**9  # 1000 s ahead of every clock here
    quorum[0].hset(lock_keys[0], "t", str(ahead))  # a tombstone on the first primary
    quorum[0].pexpire(lock_keys[0], 60_000)
    first = lock("fenced")
    assert first.acquire()
    assert first.fencing_token == ahead + 1
    tokens = [
        int(client.hget(key, "t") or 0) for client, key in zip(quorum, lock_keys, strict=True)
    ]
    assert sum(1 for token in tokens if token == ahead + 1) >= backend.needed
    first.release()
    for client, key in list(zip(quorum, lock_keys, strict=True))[:2]:  # restarted empty
        client.delete(key)
    second = lock("fenced")
    assert second.acquire()
    assert second.fencing_token is not None
    assert second.fencing_token > ahead + 1
    second.release()


def _log_sections(log: str, worker: int) -> None:
    """What each spawned process does: 30 sections, each written to ``log`` with its token."""
    with open(log, "a") as out:
        for _ in range(30):
            with lock("contended", timeout=5, blocking_timeout=30) as held:
                start = time.monotonic_ns()
                token = held.fencing_token
                time.sleep(0.001)  # the work of the section
                end = time.monotonic_ns()
            out.write(json.dumps([start, end, token, worker]) + "\n")
            out.flush()


def test_tokens_increase_in_section_order_across_processes(
    quorum: list[redis.Redis], tmp_path: Any
) -> None:
    """Four processes, 30 sections each: no two sections overlap, and every section's token is
    larger than the one before it (by the sections' order in time)."""
    log = tmp_path / "sections"
    pids = [spawn_child(_log_sections, str(log), worker) for worker in range(4)]
    assert wait_children(pids) == [0, 0, 0, 0]
    sections = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert len(sections) == 120
    for before, after in itertools.pairwise(sections):
        assert before[1] <= after[0], f"overlapping sections: {before} {after}"
        assert before[2] < after[2], f"token not increasing: {before} {after}"


# -- primaries failing ---------------------------------------------------------------------------


def test_two_of_five_killed_still_locks_and_three_killed_is_unavailable(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    servers[0].kill()
    servers[3].kill()
    held = lock("survivor")
    assert driver.acquire(held)
    assert driver.owned(held)
    assert driver.locked(held)
    assert not lock("survivor").acquire(blocking=False)
    driver.release(held)
    servers[4].kill()
    started = time.monotonic()
    with pytest.raises(LockUnavailable, match="2 of 5 primaries answered, 3 are needed"):
        driver.acquire(lock("survivor"))
    assert time.monotonic() - started < 2 * SOCKET_TIMEOUT + 1
    # the two that answered gave their grants back
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    for i in (1, 2):
        assert not quorum[i].hget(backend.members[i].keys_for("survivor").lock, "s")


def test_a_frozen_primary_costs_at_most_its_socket_timeout(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    servers[2].pause()
    try:
        for _ in range(3):
            started = time.monotonic()
            held = lock("frozen")
            assert driver.acquire(held)
            assert driver.owned(held)
            driver.release(held)
            assert time.monotonic() - started < 3 * SOCKET_TIMEOUT + 0.5
    finally:
        servers[2].resume()
    # the frozen primary ran the calls queued for it: nothing is left held there
    wait_until(lambda: holders(quorum, "frozen") == 0, timeout=5)


def attempt_on_a_late_majority(
    servers: list[RedisServer], driver: SyncDriver, **options: Any
) -> Future[bool]:
    """An acquire of "late" (0.2 s lease) whose replies from three of the five primaries come
    after its lease but within the socket timeout: those three are paused for 0.3 s with its
    requests in them. It runs in a thread whose connections are made first."""
    ready, go = threading.Event(), threading.Event()

    def run() -> bool:
        with driver.entered(lock("late")):  # this thread's connections, the scripts known
            pass
        ready.set()
        assert go.wait(CALL_SECONDS)
        return driver.acquire(lock("late", timeout=0.2), **options)

    got = start(run)
    assert ready.wait(CALL_SECONDS)
    for server in servers[:3]:
        server.pause()
    try:
        go.set()
        for server in servers[:3]:
            wait_for_unread_request(server.port)
        time.sleep(0.3)  # the fault itself: longer than the lease, shorter than the timeout
    finally:
        for server in servers[:3]:
            server.resume()
    return got


def test_a_blocking_acquire_goes_on_after_a_majority_granted_too_late(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    """The majority's grants are given back, and the acquire tries again while it may wait."""
    # A socket timeout well past the 0.3 s pause: on a loaded machine the pause, counted from
    # the first request sent, can near the suite's 0.5 s and become a timeout instead.
    patient = override_settings(CACHES=quorum_caches(servers, socket_timeout=LATE_SOCKET_TIMEOUT))
    with patient:
        late_majority_is_given_back(quorum, servers, driver)


def late_majority_is_given_back(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    got = attempt_on_a_late_majority(servers, driver, blocking_timeout=8)
    assert got.result(CALL_SECONDS) is True
    wait_until(lambda: holders(quorum, "late") == 0, timeout=1)  # its lease ends unreleased
    late = attempt_on_a_late_majority(servers, driver, blocking=False)
    with pytest.raises(LateGrant, match="given back"):  # not blocking: it ends
        late.result(CALL_SECONDS)
    assert holders(quorum, "late") == 0


def restart_keeping_data(server: RedisServer) -> None:
    """SAVE, SIGKILL and start again on the same port: the server keeps its keys (it loads
    its snapshot), and every connection made to it before is dead."""
    with redis.Redis(port=server.port) as client:
        client.save()
    server.kill()
    server.start()


def test_a_primary_restarted_between_two_calls_of_a_thread_is_reconnected(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    """Two of five down, so every step needs the other three; one of them restarts between
    two calls of the same thread: the next call's request on its dead connection is sent
    again on a new one, for acquire, extend and release alike (issue 20)."""
    servers[3].kill()
    servers[4].kill()
    try:
        held = lock("restarted", timeout=30)
        assert driver.acquire(held)
        restart_keeping_data(servers[0])
        driver.extend(held)
        restart_keeping_data(servers[0])
        driver.release(held)
        restart_keeping_data(servers[0])
        again = lock("restarted", timeout=30)
        assert driver.acquire(again)
        driver.release(again)
    finally:
        servers[3].start()
        servers[4].start()


@pytest.mark.slow
def test_a_sentinel_members_demoted_primary_is_left_for_the_new_one(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    """A quorum member that is a Sentinel service fails over between two calls of a thread:
    the thread's connection reaches the demoted primary, which refuses the step (READONLY);
    the step is sent again to the new primary instead of counting the member as down."""
    with SentinelTopology(replicas=1, sentinels=3, service="quorum-member") as topology:
        sentinels = [list(address) for address in topology.sentinel_addresses]
        member = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://quorum-member/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": sentinels,
                "SOCKET_TIMEOUT": SOCKET_TIMEOUT,
                "SOCKET_CONNECT_TIMEOUT": SOCKET_TIMEOUT,
            },
        }
        aliases = ["sentinel-member", "q1", "q2"]
        caches = {**quorum_caches(servers), "sentinel-member": member}
        with override_settings(CACHES=caches, REDIS_LOCK={"CACHE": aliases, "AUTO_RENEW": False}):
            with lock("before"):  # this thread's connections, one to the first primary
                pass
            new = topology.failover()
            topology.wait_until_announced(new)
            topology.settle()  # the old primary is a replica now: it answers writes READONLY
            held = lock("after")
            assert held.acquire()
            backend = runtime().backend(tuple(aliases))
            assert isinstance(backend, QuorumBackend)
            key = backend.members[0].keys_for("after").lock
            with redis.Redis(port=new.port) as client:
                assert client.hget(key, "s")  # granted there: the member voted
            held.release()


def test_a_primary_restarted_empty_after_the_ttl_gives_no_second_holder(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    """A holds on three of five (two are down); one of its three crashes and comes back empty
    only after the TTL: by then A's hold has lost its majority, so B taking it is safe."""
    servers[3].kill()
    servers[4].kill()
    first = lock("restarted", timeout=1.0, auto_renew=True)
    with received(lock_lost) as lost:
        assert first.acquire()
        servers[2].kill()
        wait_until(lambda: lost, timeout=5)  # renewals reach two of five: not a majority
    assert first.lost
    assert not first.owned()
    time.sleep(first.timeout)  # the crashed primary stays down past the TTL
    for server in servers[2:]:
        server.start()
    second = lock("restarted", timeout=5)
    assert second.acquire(blocking=False)
    assert not first.owned()
    second.release()


# -- refusing what cannot work -------------------------------------------------------------------


def test_bad_quorums_are_refused_at_the_call(quorum: list[redis.Redis]) -> None:
    with pytest.raises(ValueError, match="at least 3 cache aliases"):
        lock("x", using=["q0", "q1"])
    with pytest.raises(ValueError, match="'q1' more than once"):
        lock("x", using=["q0", "q1", "q1"])
    with pytest.raises(TypeError, match="lists cache aliases"):
        lock("x", using=["q0", "q1", 2])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not set"):
        lock("x", using={"q0", "q1", "q2"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 3"):
        locked("x", using=["q0"])


def bad_quorum_caches(servers: list[RedisServer]) -> dict[str, Any]:
    """The quorum's caches, and aliases that cannot be members: one on the server and
    database of q1, one on another database of q1's server (one server: one failure), and one
    that is not a Redis cache."""
    caches = quorum_caches(servers)
    caches["same"] = {**caches["q1"], "KEY_PREFIX": "other"}
    caches["db3"] = {**caches["q1"], "LOCATION": servers[1].url.replace("/0", "/3")}
    caches["mem"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    return caches


def test_two_aliases_on_one_server_are_refused(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    with override_settings(CACHES=bad_quorum_caches(servers)):
        with pytest.raises(ImproperlyConfigured, match=r"'q1' and 'same' .* same Redis server"):
            lock("x", using=["q0", "q1", "same"])
        with pytest.raises(ImproperlyConfigured, match=r"'q1' and 'db3' .* same Redis server"):
            lock("x", using=["q0", "q1", "db3"])
        with pytest.raises(ImproperlyConfigured, match=r"The cache 'mem' .* not a Redis cache"):
            lock("x", using=["q0", "q1", "mem"])


@pytest.mark.parametrize(
    ("cache", "check", "message"),
    [
        (["q0", "q1"], "django_redis_lock.E012", "at least 3 cache aliases"),
        (["q0", "q1", "q0"], "django_redis_lock.E012", "more than once"),
        (["q0", "q1", "nope"], "django_redis_lock.E002", "'nope', which is not an alias in CACHES"),
        (["q0", "q1", "mem"], "django_redis_lock.E003", "is not a cache locks can use"),
        (["q0", "q1", "same"], "django_redis_lock.E012", "same Redis server"),
        (["q0", "q1", "db3"], "django_redis_lock.E012", "same Redis server"),
    ],
)
def test_system_checks_refuse_bad_quorums(
    servers: list[RedisServer], cache: list[str], check: str, message: str
) -> None:
    with override_settings(CACHES=bad_quorum_caches(servers), REDIS_LOCK={"CACHE": cache}):
        errors = [
            m for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock.E")
        ]
    assert [error.id for error in errors] == [check], errors
    assert message in errors[0].msg


def test_system_checks_say_wait_replicas_does_not_apply_to_a_quorum(
    quorum: list[redis.Redis],
) -> None:
    with override_settings(REDIS_LOCK={"CACHE": list(ALIASES), "WAIT_REPLICAS": 1}):
        messages = [
            m for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock")
        ]
    # only W009: the members' replicas are not checked (W005, W012), a quorum sends no WAIT
    assert [message.id for message in messages] == ["django_redis_lock.W009"]


def test_system_checks_accept_a_quorum(quorum: list[redis.Redis]) -> None:
    messages = [
        m for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock")
    ]
    assert messages == []


# -- the manager, the command, the admin, @locked ------------------------------------------------


def test_the_manager_lists_a_quorum_lock_once_with_its_primaries(
    quorum: list[redis.Redis],
) -> None:
    held = lock("listed", label="nightly")
    assert held.acquire()
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    quorum[4].delete(backend.members[4].keys_for("listed").lock)  # one primary forgot it
    assert lock("leftover").acquire()
    for client, member in list(zip(quorum, backend.members, strict=True))[:3]:
        client.delete(member.keys_for("leftover").lock)  # held on a minority: not held
    manager = get_lock_manager()
    infos = list(manager.list())
    assert [info.name for info in infos] == ["listed"]
    (info,) = infos
    assert info.primaries == ("q0", "q1", "q2", "q3")
    assert info.fencing_token == held.fencing_token
    assert info.label == "nightly"
    assert 25 < info.ttl <= 30
    got = manager.get("listed")
    assert got is not None
    assert (got.name, got.primaries, got.fencing_token) == (
        info.name,
        info.primaries,
        held.fencing_token,
    )
    assert manager.get("leftover") is None
    page = manager.page(size=1)
    assert [found.name for found in page.locks] == ["listed"]
    assert page.next_cursor == ""
    with pytest.raises(ValueError, match="page cursor"):
        manager.page(cursor="0-0")
    # a force release frees every primary, and the holder learns it when it releases
    assert manager.release("listed")
    assert holders(quorum, "listed") == 0
    with pytest.raises(Exception, match="no longer held"):
        held.release()


def test_clear_releases_on_every_primary(quorum: list[redis.Redis]) -> None:
    for name in ("a:1", "a:2", "b:1"):
        assert lock(name).acquire()
    assert get_lock_manager().clear("a:*") == 2
    assert holders(quorum, "a:1") == holders(quorum, "a:2") == 0
    assert holders(quorum, "b:1") == PRIMARIES
    assert get_lock_manager(ALIASES).force_release("b:1", fencing_token=1) is None
    assert holders(quorum, "b:1") == PRIMARIES


def test_the_command_lists_and_releases_a_quorum_lock(quorum: list[redis.Redis]) -> None:
    from io import StringIO

    from django.core.management import call_command

    held = lock("cmd")
    assert held.acquire()
    out = StringIO()
    call_command("locks", "list", "--json", "--using", ",".join(ALIASES), stdout=out)
    (found,) = json.loads(out.getvalue())
    assert found["primaries"] == ALIASES
    assert found["fencing_token"] == held.fencing_token
    out = StringIO()
    call_command("locks", "list", stdout=out)
    assert "PRIMARIES" in out.getvalue()
    assert "q0, q1, q2, q3, q4" in out.getvalue()
    out = StringIO()
    call_command("locks", "release", "cmd", stdout=out)
    assert "Released 'cmd'" in out.getvalue()
    assert holders(quorum, "cmd") == 0


@pytest.mark.django_db
def test_the_admin_shows_and_releases_a_quorum_lock(
    quorum: list[redis.Redis], admin_client: Any
) -> None:
    from django_redis_lock.admin.values import form_value

    held = lock("admin:1")
    assert held.acquire()
    changelist = "/admin/django_redis_lock/lock/"
    page = admin_client.get(changelist).content.decode()
    assert "admin:1" in page
    assert "q0, q1, q2, q3, q4" in page
    selection = {"action": "release_selected", "_selected_action": [form_value("admin:1")]}
    confirm = admin_client.post(changelist, selection)
    assert confirm.status_code == 200
    values = [form_value("admin:1", held.fencing_token)]
    done = admin_client.post(
        changelist, {"action": "release_selected", "_selected_action": values, "post": "yes"}
    )
    assert done.status_code == 302
    assert holders(quorum, "admin:1") == 0


@pytest.mark.django_db
def test_listings_say_which_primaries_did_not_answer(
    quorum: list[redis.Redis], servers: list[RedisServer], admin_client: Any
) -> None:
    """Two of five primaries down: the listing still shows what a majority holds, and says
    which primaries did not answer: the manager, the command (a warning line, and each JSON
    object) and the admin (issue 20)."""
    from io import StringIO

    from django.core.management import call_command

    held = lock("partly-seen")
    assert held.acquire()
    servers[3].kill()
    servers[4].kill()
    try:
        listing = get_lock_manager().list()
        (info,) = list(listing)
        assert info.primaries == ("q0", "q1", "q2")
        assert info.unanswered == ("q3", "q4")
        assert sorted(listing.unanswered) == ["q3", "q4"]
        assert "refused" in listing.unanswered["q3"].lower()
        page = get_lock_manager().page()
        assert sorted(page.unanswered) == ["q3", "q4"]
        out, err = StringIO(), StringIO()
        call_command("locks", "list", "--json", stdout=out, stderr=err)
        (found,) = json.loads(out.getvalue())
        assert found["unanswered"] == ["q3", "q4"]
        assert "2 primaries did not answer (q3: " in err.getvalue()
        out, err = StringIO(), StringIO()
        call_command("locks", "list", stdout=out, stderr=err, no_color=True)
        assert "partly-seen" in out.getvalue()
        assert "a lock held only there is not listed" in err.getvalue()
        shown = admin_client.get("/admin/django_redis_lock/lock/").content.decode()
        assert "2 of the quorum's primaries did not answer (q3: " in shown
    finally:
        servers[3].start()
        servers[4].start()
    assert get_lock_manager().page().unanswered == {}


@pytest.mark.urls("tests.urls")
def test_locked_functions_and_views_over_a_quorum(quorum: list[redis.Redis], client: Any) -> None:
    from django_redis_lock import LockBusy

    @locked("job:{n}", blocking_timeout=0)
    def job(n: int) -> int:
        assert holders(quorum, f"job:{n}") == PRIMARIES
        return n

    assert job(3) == 3
    with lock("job:4"), pytest.raises(LockBusy):
        job(4)
    for path in ("/pay/7/", "/apay/7/"):
        response = client.get(path)
        assert response.status_code == 200
        assert response.json()["label"] == f"tests.views.{path[1:-3]} GET {path}"  # held then
        with lock("invoice:7", timeout=12):
            busy = client.get(path)
        assert busy.status_code == 423
        assert busy["Retry-After"] in ("11", "12")


@pytest.fixture(scope="module")
def quorum_worker(
    servers: list[RedisServer],
    celery_broker_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """A Celery worker process whose locks are quorum locks on the five primaries."""
    pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")
    from tests.celery_worker import celery_worker

    env = {
        "REDIS_URL": servers[0].url,  # where the task's gates are
        "REDIS_LOCK_QUORUM": ",".join(server.url for server in servers),
    }
    with celery_worker(celery_broker_server, tmp_path_factory.mktemp("celery"), env):
        yield


@pytest.mark.slow
def test_a_locked_celery_task_over_a_quorum(
    quorum: list[redis.Redis], servers: list[RedisServer], quorum_worker: None
) -> None:
    from django_redis_lock import LockBusy
    from testproject.settings import build_quorum_caches
    from testproject.tasks import build_report

    caches = build_quorum_caches([server.url for server in servers])
    with override_settings(
        CACHES={**quorum_caches(servers), **caches}, REDIS_LOCK={"CACHE": list(caches)}
    ):
        first = build_report.delay(7, "gate:7")
        assert quorum[0].blpop(["gate:7:started"], timeout=30)
        info = get_lock_manager().get("report:7")
        assert info is not None
        assert info.primaries == tuple(caches)
        assert info.label == f"testproject.tasks.build_report task {first.id}"
        with pytest.raises(LockBusy):
            build_report.delay(7, "gate:7-second").get(timeout=30)
        quorum[0].rpush("gate:7", "open")
        assert first.get(timeout=30) == "report 7 built"
        assert get_lock_manager().get("report:7") is None


def test_sentinel_services_count_as_one_primary_only_with_the_same_sentinels(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    """Two Sentinel services of the same name but different sentinels are two primaries; the
    same service through the same sentinels is one (nothing connects to tell)."""
    from redis.sentinel import Sentinel

    def service(*ports: int) -> dict[str, Any]:
        sentinels = [("127.0.0.1", port) for port in ports]
        return {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://mymaster/0",
            "OPTIONS": {
                "pool_class": "redis.sentinel.SentinelConnectionPool",
                "service_name": "mymaster",
                "sentinel_manager": Sentinel(sentinels),
            },
        }

    caches = quorum_caches(servers) | {
        "east": service(1, 2),
        "west": service(3, 4),
        "east2": service(2, 1),
    }
    with override_settings(CACHES=caches):
        assert lock("x", using=["q0", "east", "west"]).name == "x"
        with pytest.raises(ImproperlyConfigured, match="'east' and 'east2'"):
            lock("x", using=["q0", "east", "east2"])


def test_primaries_skipped_as_away_are_asked_when_others_fail_since(
    quorum: list[redis.Redis], servers: list[RedisServer], driver: SyncDriver
) -> None:
    """Two primaries fail (and are skipped for a moment), come back, and a third fails: the
    next call asks the two again rather than giving up with two answers of five."""
    servers[0].kill()
    servers[1].kill()
    held = lock("away")
    assert driver.acquire(held)  # three answer; the two dead ones are now skipped a while
    driver.release(held)
    servers[0].start()
    servers[1].start()
    servers[2].kill()
    again = lock("away")
    assert driver.acquire(again, blocking=False)
    driver.release(again)


@pytest.mark.parametrize(
    "parts",
    [
        ("EVALSHA", "a" * 40, 3, "k1", "{tag}:k2", "k3", "secret.1", 30000, "host pid 1", ""),
        ("EVALSHA", "b", 1, "ключ", -5, 1.5, b"\x00\xff", "x" * 1000),
    ],
)
@pytest.mark.parametrize("hiredis", [True, False])
def test_a_lock_packs_commands_as_the_client_does(
    parts: tuple[Any, ...], hiredis: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quorum's packer and the lane's (hiredis's where installed, else the quorum's)."""
    from redis.connection import PythonRespSerializer  # redis-py's own packer

    from django_redis_lock.backends import wire

    if hiredis and importlib.util.find_spec("hiredis") is None:
        pytest.skip("hiredis is not installed")
    if not hiredis:
        monkeypatch.setattr(wire, "hiredis", None)
    encoder = redis.Redis().get_encoder()
    expected = b"".join(PythonRespSerializer(6000, encoder.encode).pack(*parts))
    assert b"*%d\r\n" % len(parts) + wire.bulk(parts) == expected
    assert wire.pack_command(parts, "utf-8", "strict") == expected
    with pytest.raises(TypeError, match="Cannot send"):
        wire.bulk(("EVALSHA", None))


def test_a_client_that_encodes_text_otherwise_gets_its_own_encoding() -> None:
    from redis.connection import PythonRespSerializer

    from django_redis_lock.backends import wire

    parts = ("EVALSHA", "a" * 40, 1, "clé", "été", 5)
    encoder = redis.Redis(encoding="latin-1").get_encoder()
    expected = b"".join(PythonRespSerializer(6000, encoder.encode).pack(*parts))
    assert wire.pack_command(parts, "latin-1", "strict") == expected


@fork_is_the_point  # the connections a forked child inherits
def test_each_thread_and_each_forked_child_talks_on_connections_of_its_own(
    quorum: list[redis.Redis],
) -> None:
    """A quorum's blocking calls use connections kept per thread: another thread makes its
    own (and drops it when it ends), and a child forked while the parent has some makes its
    own (one socket used by two processes would mix their replies)."""
    made = lock("made-before-fork")  # made in the parent, used in both processes
    assert made.acquire()
    made.release()
    eviction_looked()  # its connections, made meanwhile, would be among the new clients

    def clients() -> set[str]:  # by address: other tests' connections may come and go
        return {client["addr"] for client in quorum[0].client_list()}

    before = clients()
    seen: list[set[str]] = []

    def other_thread() -> None:
        with lock("thread-own"):
            seen.append(clients() - before)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(10)
    assert len(seen) == 1
    assert len(seen[0]) == 1  # the thread's own connection to the primary
    # dropped with its thread (the client's connection objects are freed by the collector)
    wait_until(lambda: gc.collect() >= 0 and not seen[0] & clients())

    def cycles() -> None:
        for _ in range(50):
            assert made.acquire()
            made.release()

    pid = fork_child(cycles)
    for _ in range(50):  # meanwhile, the parent on its own connections
        with lock("parent-own"):
            pass
    assert wait_children([pid]) == [0]


def test_a_settings_change_hangs_up_the_quorums_connections(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    assert lock("hung-up").acquire(blocking=False)
    connected = len(quorum[0].client_list())
    with override_settings(REDIS_LOCK={"CACHE": ALIASES, "TIMEOUT": 5}):
        wait_until(lambda: len(quorum[0].client_list()) < connected)


def test_statistics_are_recorded_on_the_primaries_that_granted(
    quorum: list[redis.Redis], servers: list[RedisServer]
) -> None:
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    servers[4].kill()
    for _ in range(3):
        with lock("counted"):
            pass
    recorded = [
        int(client.hget(member.keys_for("counted").stats, "n") or 0)
        for client, member in list(zip(quorum, backend.members, strict=True))[:4]
    ]
    assert recorded == [3, 3, 3, 3]  # the killed one granted nothing
    manager = get_lock_manager()
    stats = manager.get_stats("counted")
    assert stats is not None
    assert stats.acquisitions == 3
    assert [found.name for found in manager.stats()] == ["counted"]
    # a hold found gone is counted once, whichever primaries answer
    held = lock("counted")
    assert held.acquire()
    held_busy = lock("counted")
    assert not held_busy.acquire(blocking=False)
    assert manager.release("counted")
    with pytest.raises(Exception, match="no longer held"):
        held.release()
    stats = manager.get_stats("counted")
    assert stats is not None
    # by an operator: counted as forced, not lost (issue 21)
    assert (stats.acquisitions, stats.busy, stats.lost, stats.forced) == (3, 1, 0, 1)


# -- hostile input (issue 21) --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_pages_through_a_quorums_locks(
    quorum: list[redis.Redis], admin_client: Any
) -> None:
    names = [f"page:{i:03}" for i in range(105)]
    for name in names:
        assert lock(name, timeout=60).acquire(blocking=False)
    changelist = "/admin/django_redis_lock/lock/"
    first = admin_client.get(changelist).content.decode()
    link = re.search(r'<a href="\?([^"]*)" class="next-page">', first)
    assert link is not None
    second = admin_client.get(changelist + "?" + html.unescape(link[1]))
    assert second.status_code == 200  # not "this page link is not valid"
    shown = re.findall(
        r'<th class="field-name"><a href="[^"]*">([^<]*)</a>', second.content.decode()
    )
    assert shown == names[100:]
    assert admin_client.get(changelist, {"cursor": "after:" + "x" * 5000}).status_code == 400


@pytest.mark.parametrize("garbage", [b"\xff", b"5" * 5000], ids=["not-utf8", "5000-digits"])
@pytest.mark.urls("tests.urls")
def test_garbage_in_one_primarys_statistics_never_stops_the_quorum(
    quorum: list[redis.Redis], client: Any, garbage: bytes
) -> None:
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    with lock("invoice:7"):
        pass
    quorum[0].hset(backend.members[0].keys_for("invoice:7").stats, "n", garbage)
    stats = lock("invoice:7").stats()
    assert stats is not None
    assert stats.acquisitions == 1
    with lock("invoice:7", timeout="auto"):  # reads the statistics first
        busy = client.get("/pay/7/")
    assert busy.status_code == 423


def test_one_primarys_crafted_counts_decide_nothing(quorum: list[redis.Redis]) -> None:
    """Twenty real holds of 10 ms on every primary; one primary says a thousand of an hour:
    the statistics a majority backs are the real ones."""
    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    for _ in range(20):
        with lock("crafted"):
            pass
    stats_key = backend.members[0].keys_for("crafted").stats
    quorum[0].hset(stats_key, mapping={"n": 1000, f"h{len(BOUNDS_MS)}": 1000, "m": 3_600_000})
    for stats in (lock("crafted").stats(), get_lock_manager().get_stats("crafted")):
        assert stats is not None
        assert stats.acquisitions == 20
        assert stats.suggested_timeout is not None
        assert stats.suggested_timeout < 2
    (listed,) = get_lock_manager().stats("crafted")
    assert listed.acquisitions == 20


@pytest.mark.parametrize(("size", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError)])
def test_a_quorums_page_refuses_a_bad_size(
    quorum: list[redis.Redis], size: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="page size"):
        get_lock_manager().page(size=size)


def test_a_hold_an_extend_finds_gone_is_counted_once(quorum: list[redis.Redis]) -> None:
    """Each primary that no longer had it counted it once (and the quorum once more) before."""
    from django_redis_lock import LockNotOwned

    backend = runtime().backend(tuple(ALIASES))
    assert isinstance(backend, QuorumBackend)
    held = lock("extended")
    assert held.acquire()
    for client, member in zip(quorum, backend.members, strict=True):
        client.delete(member.keys_for("extended").lock)  # gone, not by an operator
    with pytest.raises(LockNotOwned):
        held.extend(10)
    stats = get_lock_manager().get_stats("extended")
    assert stats is not None
    assert (stats.lost, stats.forced) == (1, 0)


def test_semaphores_and_read_write_locks_are_refused_on_a_quorum(quorum: list[redis.Redis]) -> None:
    from django_redis_lock import locked, rwlock, semaphore
    from django_redis_lock.locked import SEMAPHORES

    with pytest.raises(ImproperlyConfigured, match="cannot be quorum locks"):
        semaphore("x", 2)
    with pytest.raises(ImproperlyConfigured, match="cannot be quorum locks"):
        rwlock("x")
    with pytest.raises(ImproperlyConfigured, match="cannot be a quorum lock"):
        locked("x", limit=2, using=list(ALIASES))
    SEMAPHORES.clear()  # those of other tests of this process
    locked("x", limit=2)  # on REDIS_LOCK["CACHE"]: the system check says it
    ids = [
        m.id for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock")
    ]
    assert ids == ["django_redis_lock.E013"]


def test_a_rate_limited_callable_is_refused_on_a_quorum(quorum: list[redis.Redis]) -> None:
    from django_redis_lock import locked
    from django_redis_lock.locked import RATE_LIMITS

    with pytest.raises(ImproperlyConfigured, match="cannot be kept on a quorum"):
        locked("x", rate="1/s", using=list(ALIASES))
    RATE_LIMITS.clear()  # those of other tests of this process
    ping = locked("x", rate="1/s")(lambda: "pong")  # on REDIS_LOCK["CACHE"]: the check says it
    ids = [
        m.id for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock")
    ]
    assert ids == ["django_redis_lock.E017"]
    with pytest.raises(ImproperlyConfigured):
        ping()


def test_a_leadership_leads_hands_over_and_is_deposed(
    quorum: list[redis.Redis], driver: SyncDriver
) -> None:
    leads_hands_over_and_is_deposed(driver, "quorum")


def test_rate_limits_are_refused_on_a_quorum(quorum: list[redis.Redis]) -> None:
    from django_redis_lock import rate_limit

    for using in (None, list(ALIASES)):
        with pytest.raises(ImproperlyConfigured, match="Rate limits cannot be quorum locks") as no:
            rate_limit("x", "10/s", using=using)
        assert "admits more than the rate" in str(no.value)
    assert not any(client.keys("*") for client in quorum)
    rate_limit("x", "10/s", using=ALIASES[0])  # one of its primaries alone is a single server


def test_a_cached_once_function_is_refused_on_a_quorum(quorum: list[redis.Redis]) -> None:
    from django_redis_lock import cached_once
    from django_redis_lock.cached.decorator import DECLARED

    DECLARED.clear()  # those of other tests of this process
    report = cached_once("report")(lambda: 42)  # on REDIS_LOCK["CACHE"]: the check says it
    ids = [
        m.id for m in run_checks(tags=["caches"]) if (m.id or "").startswith("django_redis_lock")
    ]
    assert ids == ["django_redis_lock.E019"]
    with pytest.raises(ImproperlyConfigured):
        report()
