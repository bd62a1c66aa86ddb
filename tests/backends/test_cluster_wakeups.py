"""Wake-ups on a Redis 7+ cluster started here: sharded pub/sub on the node of each lock's slot,
through slot moves and failovers, for every kind of waiter; classic PUBLISH on request."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
import valkey
import valkey.exceptions
from django.test.utils import override_settings

from django_redis_lock import Lock, leader, lock, rwlock, semaphore
from django_redis_lock.backends.cluster import SHARDED_MARK, ClusterLockBackend
from django_redis_lock.ops.rules import CLASSIC_WAKE_UPS, SHARDED_WAKE_UPS
from django_redis_lock.runtime import runtime, shards
from django_redis_lock.runtime.shards import ShardedListener
from django_redis_lock.runtime.tickets import Grant, SyncTicket
from testproject.cluster import ClusterTopology, info_cluster, keyslot
from testproject.redis_server import RedisServer
from testproject.topology import call, wait_for
from tests.backends.test_cluster import spread_names
from tests.helpers import doctor, keys, start, wait_until

pytestmark = pytest.mark.slow

# Long enough that a waiter nobody wakes is still waiting when the test gives up on it.
HOLD_SECONDS = 30
WOKEN_WITHIN = 1.0


@pytest.fixture(scope="module", autouse=True)
def sharded(cluster: ClusterTopology) -> None:
    if not _knows_spublish(cluster.servers[0]):
        pytest.skip("the redis-server here has no sharded pub/sub (Redis 7+)")


def _knows_spublish(server: RedisServer) -> bool:
    return bool(call(server.host, server.port, "COMMAND", "INFO", "SPUBLISH")[0])  # type: ignore[index]


def shard_subscribers(server: RedisServer, channel: str) -> int:
    """How many connections subscribe ``channel`` with sharded pub/sub on ``server``."""
    found = call(server.host, server.port, "PUBSUB", "SHARDNUMSUB", channel)
    assert isinstance(found, list)
    return int(str(found[1]))


def _entry_channel(cluster: ClusterTopology, name: str, lock_keys: Any = None) -> str:
    """The channel of the (one) waiter queued on ``name``, as its entry keeps it."""
    found = lock_keys or keys(name)
    server = cluster.primary_of(found.lock)
    with valkey.Valkey(server.host, server.port) as client:
        entries = list(client.hvals(found.waiters))
    assert len(entries) == 1
    channel: str = json.loads(entries[0])["c"]
    return channel


def _woken_after_release(
    acquire: Callable[[], Any], release: Callable[[], None], queued: Callable[[], Any]
) -> float:
    """Start ``acquire`` in a thread, wait for it to queue, release: seconds from the release
    until the acquire returned (it must have got the lock)."""
    result: Future[tuple[Any, float]] = start(lambda: (acquire(), time.monotonic()))
    wait_until(queued, timeout=10)
    released = time.monotonic()
    release()
    got, at = result.result(HOLD_SECONDS)
    assert got
    return at - released


def _queued(name: str) -> Callable[[], Any]:
    backend = runtime().backend()
    assert isinstance(backend, ClusterLockBackend)
    return lambda: backend.client.zcard(keys(name).queue)


def _waiting_behind(name: str) -> tuple[Lock, Lock, Future[tuple[bool, float]]]:
    """A holder of ``name``, and a waiter queued behind it in a thread: (holder, waiter, the
    waiter's (acquired, when)). The process waited on ``name`` once before, so that the
    channel is subscribed already: the waiter does not look again when it is confirmed."""
    _waited_on([name])
    holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
    assert holder.acquire()
    waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
    result: Future[tuple[bool, float]] = start(lambda: (waiter.acquire(), time.monotonic()))
    wait_until(_queued(name), timeout=10)
    return holder, waiter, result


def _woken_by_the_release(
    holder: Lock, waiter: Lock, result: Future[tuple[bool, float]], subscribed: Callable[[], int]
) -> None:
    """Once the waiter's channel is ``subscribed`` where it must be, the release wakes it."""
    wait_for("the listener to follow the slot", lambda: subscribed() or None, 20)
    released = time.monotonic()
    holder.release()
    got, at = result.result(HOLD_SECONDS)
    assert got is True
    assert at - released < WOKEN_WITHIN
    waiter.release()


def bus_messages(cluster: ClusterTopology) -> dict[str, int]:
    """Pub/sub messages the nodes sent each other over the cluster bus so far."""
    totals = {"classic": 0, "sharded": 0}
    for server in cluster.servers:
        if server.running:
            state = info_cluster(server)
            totals["classic"] += int(state.get("cluster_stats_messages_publish_sent", 0))
            totals["sharded"] += int(state.get("cluster_stats_messages_publishshard_sent", 0))
    return totals


def test_waiters_queue_with_a_sharded_channel_in_the_slot_of_their_lock(
    on_cluster: ClusterTopology,
) -> None:
    backend = runtime().backend()
    assert isinstance(backend, ClusterLockBackend)
    assert backend.sharded_wake_ups()
    assert isinstance(runtime().listener(backend), ShardedListener)
    for name in spread_names(on_cluster, "sharded:slot:", 1):
        holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
        assert holder.acquire()
        waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
        waited = _woken_after_release(waiter.acquire, holder.release, _queued(name))
        assert waited < WOKEN_WITHIN
        waiter.release()
        # The channel a waiter queues with: marked, in the lock's slot, subscribed on the
        # lock's node only.
        again = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
        assert again.acquire()
        late = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
        result = start(late.acquire)
        wait_until(_queued(name), timeout=10)
        channel = _entry_channel(on_cluster, name)
        assert channel.startswith(SHARDED_MARK)
        channel = channel[1:]
        assert keyslot(channel) == keyslot(keys(name).lock)
        owner = on_cluster.primary_of(keys(name).lock)
        for server in on_cluster.primaries():
            with valkey.Valkey(server.host, server.port) as client:
                assert client.pubsub_channels() == []  # no classic channel anywhere
            assert shard_subscribers(server, channel) == (1 if server is owner else 0)
        again.release()
        assert result.result(10) is True
        late.release()


def test_a_hand_over_sends_no_classic_message_over_the_cluster_bus(
    on_cluster: ClusterTopology,
) -> None:
    name = "sharded:bus"
    holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
    assert holder.acquire()
    waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
    before = bus_messages(on_cluster)
    hand_overs = 5
    for _ in range(hand_overs):
        _woken_after_release(waiter.acquire, holder.release, _queued(name))
        holder, waiter = waiter, holder
    after = bus_messages(on_cluster)
    assert after["classic"] == before["classic"], (before, after)
    # At most one message per replica of the lock's shard (one here) for each grant: none
    # while the bus link to the replica is down (the nodes time out in a second, and a loaded
    # machine makes links drop).
    assert after["sharded"] - before["sharded"] <= 2 * hand_overs, (before, after)
    holder.release()


def test_classic_wake_ups_on_request(on_cluster: ClusterTopology) -> None:
    with override_settings(REDIS_LOCK={"CLUSTER_WAKE_UPS": "classic"}):
        backend = runtime().backend()
        assert isinstance(backend, ClusterLockBackend)
        assert not backend.sharded_wake_ups()
        assert not isinstance(runtime().listener(backend), ShardedListener)
        name = "sharded:classic"
        holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
        assert holder.acquire()
        waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
        before = bus_messages(on_cluster)
        waited = _woken_after_release(waiter.acquire, holder.release, _queued(name))
        assert waited < WOKEN_WITHIN
        # A classic PUBLISH goes over the bus to every other node it has a link to (bench/
        # cluster_wakeups.py counts one per node; a loaded machine makes links drop).
        assert bus_messages(on_cluster)["classic"] > before["classic"]
        waiter.release()


def test_the_doctor_says_waiters_are_woken_with_sharded_pub_sub(
    on_cluster: ClusterTopology,
) -> None:
    status, findings, text = doctor()
    assert status == 0
    (said,) = [finding for finding in findings if finding["check"] == "wake-ups"]
    message = f"{SHARDED_WAKE_UPS}: every primary has SPUBLISH"
    assert said == {
        "level": "ok",
        "check": "wake-ups",
        "subject": "cache 'default'",
        "message": message,
        "fix": "",
    }
    assert f"wake-ups cache 'default': {message}." in " ".join(text.split())


def test_the_doctor_says_classic_wake_ups_when_the_setting_asks_for_them(
    on_cluster: ClusterTopology,
) -> None:
    with override_settings(REDIS_LOCK={"CLUSTER_WAKE_UPS": "classic"}):
        status, findings, text = doctor()
    assert status == 0
    (said,) = [finding for finding in findings if finding["check"] == "wake-ups"]
    message = f"{CLASSIC_WAKE_UPS}: REDIS_LOCK['CLUSTER_WAKE_UPS'] is \"classic\""
    assert (said["level"], said["message"]) == ("ok", message)
    assert f"wake-ups cache 'default': {message}." in " ".join(text.split())


def test_a_wake_ups_setting_the_check_refuses_reads_as_auto_with_one_error(
    on_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture
) -> None:
    with override_settings(REDIS_LOCK={"CLUSTER_WAKE_UPS": "sharded"}):
        backend = runtime().backend()
        assert isinstance(backend, ClusterLockBackend)
        assert backend.sharded_wake_ups()
        assert isinstance(runtime().listener(backend), ShardedListener)
        name = "sharded:misconfigured"
        holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
        assert holder.acquire()
        waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
        assert _woken_after_release(waiter.acquire, holder.release, _queued(name)) < WOKEN_WITHIN
        waiter.release()
        status, findings, _ = doctor()
    assert status == 1  # E018
    said = {finding["check"]: finding for finding in findings}
    assert said["settings"]["subject"] == "django_redis_lock.E018"
    assert said["wake-ups"]["message"].startswith(SHARDED_WAKE_UPS)
    logged = [record for record in caplog.records if "CLUSTER_WAKE_UPS" in record.getMessage()]
    assert [record.levelname for record in logged] == ["ERROR"]
    assert logged[0].getMessage() == (
        "REDIS_LOCK['CLUSTER_WAKE_UPS'] must be \"auto\" or \"classic\", not 'sharded'. "
        "Cluster caches wake waiters as with 'auto'."
    )


def test_semaphores_read_write_locks_and_leaders_are_woken_on_their_shard(
    on_cluster: ClusterTopology,
) -> None:
    before = bus_messages(on_cluster)
    permits = semaphore("sharded:permits", 1, timeout=HOLD_SECONDS, auto_renew=False)
    assert permits.acquire()
    other = semaphore("sharded:permits", 1, blocking_timeout=HOLD_SECONDS, auto_renew=False)
    backend = runtime().backend()
    assert isinstance(backend, ClusterLockBackend)
    queue = backend.shared_keys_for("sharded:permits").queue
    assert (
        _woken_after_release(other.acquire, permits.release, lambda: backend.client.zcard(queue))
        < WOKEN_WITHIN
    )
    other.release()

    guarded = rwlock("sharded:rw", timeout=HOLD_SECONDS, auto_renew=False)
    writer = guarded.write()
    assert writer.acquire()
    reader = rwlock("sharded:rw", blocking_timeout=HOLD_SECONDS, auto_renew=False).read()
    queue = backend.shared_keys_for("sharded:rw", "r").queue
    assert (
        _woken_after_release(reader.acquire, writer.release, lambda: backend.client.zcard(queue))
        < WOKEN_WITHIN
    )
    reader.release()

    first = leader("sharded:lead", timeout=HOLD_SECONDS)
    first.__enter__()
    second = leader("sharded:lead", timeout=HOLD_SECONDS, blocking_timeout=HOLD_SECONDS)
    led: Future[float] = start(lambda: (second.__enter__(), time.monotonic())[1])
    wait_until(_queued("leader:sharded:lead"), timeout=10)
    resigned = time.monotonic()
    first.__exit__(None, None, None)
    assert led.result(HOLD_SECONDS) - resigned < WOKEN_WITHIN
    second.__exit__(None, None, None)
    assert bus_messages(on_cluster)["classic"] == before["classic"]


def _node_id(server: RedisServer) -> str:
    return str(call(server.host, server.port, "CLUSTER", "MYID"))


def _move_slot(
    cluster: ClusterTopology, slot: int, source: RedisServer, target: RedisServer
) -> None:
    """Move ``slot`` with its keys from ``source`` to ``target``, as resharding does."""
    source_id, target_id = _node_id(source), _node_id(target)
    call(target.host, target.port, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    call(source.host, source.port, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    found = call(source.host, source.port, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000")
    assert isinstance(found, list)
    if found:
        call(
            source.host,
            source.port,
            "MIGRATE",
            target.host,
            str(target.port),
            "",
            "0",
            "5000",
            "KEYS",
            *map(str, found),
            timeout=5,
        )
    for server in cluster.primaries():
        call(server.host, server.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)


def test_a_waiter_is_woken_after_its_slot_moved_to_another_primary(
    on_cluster: ClusterTopology,
) -> None:
    name = "sharded:moved"
    key = keys(name).lock
    holder, waiter, result = _waiting_behind(name)
    source = on_cluster.primary_of(key)
    target = next(server for server in on_cluster.primaries() if server is not source)
    _move_slot(on_cluster, keyslot(key), source, target)
    assert on_cluster.primary_of(key) is target
    channel = _entry_channel(on_cluster, name)[1:]
    _woken_by_the_release(holder, waiter, result, lambda: shard_subscribers(target, channel))


def _replica_of(cluster: ClusterTopology, primary: RedisServer) -> RedisServer:
    for server in cluster.servers:
        if server.running and server is not primary:
            state = call(server.host, server.port, "INFO", "replication")
            if f"master_port:{primary.port}" in str(state):
                return server
    raise AssertionError(f"no replica of {primary.port}")


@pytest.mark.parametrize("how", ["failover", "kill"])
def test_a_waiter_waiting_through_a_failover_is_woken_by_the_release_on_the_new_primary(
    on_cluster: ClusterTopology, how: str
) -> None:
    name = f"sharded:failover:{how}"
    key = keys(name).lock
    holder, waiter, result = _waiting_behind(name)
    old = on_cluster.primary_of(key)
    replica = _replica_of(on_cluster, old)
    with valkey.Valkey(old.host, old.port) as client:
        assert client.execute_command("WAIT", 1, 5000) == 1  # the hold and the queue replicated
    try:
        if how == "failover":  # the replica takes over; the old primary tells its subscribers
            call(replica.host, replica.port, "CLUSTER", "FAILOVER")
            wait_for(
                "the replica to take over",
                lambda: on_cluster.primary_of(key) is replica or None,
                20,
            )
        else:
            on_cluster.kill_primary_of(key)
        assert on_cluster.primary_of(key) is replica
        channel = _entry_channel(on_cluster, name)[1:]
        _woken_by_the_release(holder, waiter, result, lambda: shard_subscribers(replica, channel))
    finally:
        if not old.running:
            on_cluster.restart(old)


def _waited_on(names: list[str]) -> None:
    """This process waits once on each of ``names``, in order (a hand-over each)."""
    for name in names:
        holder = lock(name, timeout=HOLD_SECONDS, auto_renew=False)
        assert holder.acquire()
        waiter = lock(name, blocking_timeout=HOLD_SECONDS, auto_renew=False)
        assert _woken_after_release(waiter.acquire, holder.release, _queued(name)) < HOLD_SECONDS
        waiter.release()


def _subscribers(cluster: ClusterTopology, name: str, channel: str) -> int:
    return shard_subscribers(cluster.primary_of(keys(name).lock), channel)


def test_idle_channels_are_kept_up_to_a_bound_then_let_go(
    on_cluster: ClusterTopology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards, "IDLE_CHANNELS", 2)
    listener = runtime().listener(runtime().backend())
    assert isinstance(listener, ShardedListener)
    names = [f"sharded:idle:{number}" for number in range(3)]
    channels = [listener.channel_for(keys(name))[1:] for name in names]
    _waited_on(names[:2])
    # Both kept after their waiters left: the next wait on them needs no subscription.
    assert [_subscribers(on_cluster, n, c) for n, c in zip(names[:2], channels, strict=False)] == [
        1,
        1,
    ]
    _waited_on(names[2:])
    wait_for(
        "the least lately used idle channel to be let go",
        lambda: _subscribers(on_cluster, names[0], channels[0]) == 0 or None,
        10,
    )
    assert _subscribers(on_cluster, names[1], channels[1]) == 1
    assert _subscribers(on_cluster, names[2], channels[2]) == 1


def test_someone_elses_text_on_a_wake_up_channel_is_ignored(
    on_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture
) -> None:
    name = "sharded:garbage"
    holder, waiter, result = _waiting_behind(name)
    channel = _entry_channel(on_cluster, name)[1:]
    server = on_cluster.primary_of(keys(name).lock)
    for junk in ("nonsense", "a:b:c:d", "secret:x", "\xff"):
        call(server.host, server.port, "SPUBLISH", channel, junk)
    wait_until(lambda: "Ignored a malformed wake-up message" in caplog.text, timeout=10)
    _woken_by_the_release(holder, waiter, result, lambda: shard_subscribers(server, channel))


def test_the_thread_hangs_up_once_nobody_waited_for_a_while(
    on_cluster: ClusterTopology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards, "_IDLE_SECONDS", 0.2)
    name = "sharded:retire"
    _waited_on([name])
    listener = runtime().listener(runtime().backend())
    assert isinstance(listener, ShardedListener)
    channel = listener.channel_for(keys(name))[1:]
    wait_for(
        "the idle thread to hang up",
        lambda: _subscribers(on_cluster, name, channel) == 0 or None,
        10,
    )
    # A new wait starts it again.
    _waited_on([name])


def test_a_subscription_sent_to_a_node_that_does_not_serve_the_slot_follows_moved(
    on_cluster: ClusterTopology, caplog: pytest.LogCaptureFixture
) -> None:
    name = "sharded:misrouted"
    key = keys(name).lock
    owner = on_cluster.primary_of(key)
    wrong = next(server for server in on_cluster.primaries() if server is not owner)
    backend = runtime().backend()
    assert isinstance(backend, ClusterLockBackend)
    listener = runtime().listener(backend)
    assert isinstance(listener, ShardedListener)
    # The client believes another primary serves the slot (as after a stale look at the
    # cluster): the listener's SSUBSCRIBE goes there first, and is refused with MOVED.
    backend.client.nodes_manager.update_moved_exception(
        valkey.exceptions.MovedError(f"{keyslot(key)} {wrong.host}:{wrong.port}")
    )
    caplog.set_level(logging.DEBUG, logger="django_redis_lock")
    ticket, channel = SyncTicket(), listener.channel_for(keys(name))
    listener.register("misrouted-secret", ticket, channel)
    listener.start()
    try:
        wait_for(
            "the subscription to follow MOVED",
            lambda: shard_subscribers(owner, channel[1:]) or None,
            10,
        )
        assert "Wake-up channel redirected" in caplog.text
        assert shard_subscribers(wrong, channel[1:]) == 0
        call(owner.host, owner.port, "SPUBLISH", channel[1:], "misrouted-secret:7:8")
        # The confirmation told the waiter to look again (None), unless the grant came first.
        message = ticket.wait(10)
        assert (message if message is not None else ticket.wait(10)) == Grant(7, 8)
    finally:
        listener.unregister("misrouted-secret")
