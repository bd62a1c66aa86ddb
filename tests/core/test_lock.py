"""The Lock API against a real Redis: ownership, round trips, extend, validation, metadata.

A test taking the ``driver`` fixture runs through the blocking API and through the async one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import threading
import time
from typing import Any

import pytest
import redis
from django.test import override_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redis_lock import (
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TIMEOUT,
    LockBusy,
    LockError,
    LockNotOwned,
    get_lock_manager,
    lock,
    signals,
)
from testproject.redis_server import RedisServer
from tests.helpers import (
    CALL_SECONDS,
    FaultyConnection,
    SyncDriver,
    builtin_cache_with,
    commandstats,
    counted_caches,
    keys,
    received,
    round_trips,
    start,
    wait_for_unread_request,
    wait_until,
)


@pytest.mark.parametrize("alias", ["default", "builtin"])
def test_acquire_and_release_cost_one_round_trip_each(redis_url: str, alias: str) -> None:
    with counted_caches(redis_url):
        with lock("warm-up", using=alias):  # loads the scripts, once per server
            pass
        held = lock("job", using=alias)
        with round_trips() as acquire_trips:
            assert held.acquire()
        with round_trips() as release_trips:
            held.release()
    assert acquire_trips[0] == 1
    assert release_trips[0] == 1


def test_hot_path_sends_only_evalsha(redis_client: redis.Redis) -> None:
    with lock("job"):  # loads the scripts; leaves a tombstone, as any earlier release would
        pass
    redis_client.config_resetstat()
    for _ in range(10):
        with lock("job"):
            pass
    stats = commandstats(redis_client)
    assert stats["evalsha"] == 20
    assert not {"get", "set", "keys", "script|load", "script", "eval"} & set(stats)
    # Inside the scripts: only release looks for waiters (the queue's first, if any); acquire
    # sees the tombstone and looks for no queue.
    assert stats["zrange"] == 10
    assert "exists" not in stats


@pytest.mark.parametrize("alias", ["default", "builtin"])
def test_scripts_are_loaded_again_after_the_server_forgets_them(
    redis_client: redis.Redis, alias: str, driver: SyncDriver
) -> None:
    with lock("warm-up", using=alias):
        pass
    redis_client.script_flush()  # as after a restart or a failover to a fresh replica
    held = lock("job", using=alias)
    assert driver.acquire(held)
    redis_client.script_flush()
    driver.extend(held, 5)
    redis_client.script_flush()
    driver.release(held)
    assert not driver.locked(held)
    redis_client.script_flush()
    assert driver.acquire(lock("job", using=alias), blocking=False)


def test_second_holder_is_refused_until_release(driver: SyncDriver) -> None:
    first, second = lock("report"), lock("report", blocking=False)
    assert not driver.locked(first)
    assert driver.acquire(first)
    assert driver.owned(first)
    assert driver.locked(first)
    assert not driver.acquire(second)
    assert driver.locked(second)
    assert not driver.owned(second)
    driver.release(first)
    assert not driver.locked(first)
    assert driver.acquire(second)
    driver.release(second)


def test_release_without_holding_raises(driver: SyncDriver) -> None:
    never = lock("never")
    with pytest.raises(LockNotOwned):
        driver.release(never)
    held = lock("twice")
    driver.acquire(held)
    driver.release(held)
    with pytest.raises(LockNotOwned):
        driver.release(held)


def test_second_acquire_by_the_holder_raises_at_once(driver: SyncDriver) -> None:
    held = lock("single")
    driver.acquire(held)
    started = time.monotonic()
    with pytest.raises(LockError, match="reentrant=True"):
        driver.acquire(held, blocking_timeout=5)
    assert time.monotonic() - started < 1  # not after waiting for itself
    driver.release(held)


def test_reentrant_lock_needs_one_release_per_acquire(driver: SyncDriver) -> None:
    held = lock("nested", reentrant=True)
    assert driver.acquire(held)
    assert driver.acquire(held)
    token = held.fencing_token
    driver.release(held)
    assert driver.owned(held)
    assert held.fencing_token == token
    assert not driver.acquire(lock("nested", blocking=False))
    driver.release(held)
    assert not driver.locked(held)
    with pytest.raises(LockNotOwned):
        driver.release(held)


def test_stale_holder_cannot_release_or_extend_the_next_holders_lock(driver: SyncDriver) -> None:
    stale = lock("invoice", timeout=0.05, auto_renew=False)
    assert driver.acquire(stale)
    wait_until(lambda: not driver.locked(stale))
    fresh = lock("invoice", auto_renew=False)
    assert driver.acquire(fresh)
    with pytest.raises(LockNotOwned):
        driver.extend(stale)
    assert stale.lost
    with pytest.raises(LockNotOwned):
        driver.release(stale)
    assert driver.owned(fresh)
    driver.release(fresh)


def test_extend_adds_or_replaces_the_lease(driver: SyncDriver) -> None:
    held = lock("extend", timeout=10, auto_renew=False)
    driver.acquire(held)
    driver.extend(held, 20)
    assert 29 < driver.ttl(held) <= 30  # type: ignore[operator]
    driver.extend(held, 5, replace_ttl=True)
    assert 4 < driver.ttl(held) <= 5  # type: ignore[operator]
    driver.extend(held)
    assert 14 < driver.ttl(held) <= 15  # type: ignore[operator]
    driver.release(held)
    with pytest.raises(LockNotOwned):
        driver.extend(held)


def test_extend_never_makes_a_lease_longer_than_max_timeout(driver: SyncDriver) -> None:
    held = lock("extend:cap", timeout=10, auto_renew=False)
    driver.acquire(held)
    driver.extend(held, MAX_TIMEOUT)  # added to the 10 s left: capped
    assert MAX_TIMEOUT - 5 < driver.ttl(held) <= MAX_TIMEOUT  # type: ignore[operator]
    driver.release(held)


def test_ttl_is_none_when_nobody_holds_the_lock(driver: SyncDriver) -> None:
    held = lock("ttl", timeout=7)
    assert driver.ttl(held) is None
    driver.acquire(held)
    assert 6 < driver.ttl(held) <= 7  # type: ignore[operator]
    driver.release(held)
    assert driver.ttl(held) is None  # the tombstone left behind is not a hold


def test_context_manager_acquires_and_releases(driver: SyncDriver) -> None:
    with driver.entered(lock("ctx")) as held:
        assert held.fencing_token is not None
        assert driver.owned(held)
        with pytest.raises(LockBusy), driver.entered(lock("ctx", blocking_timeout=0)):
            pass
    assert not driver.locked(held)


def test_clean_exit_from_a_lost_lock_raises(driver: SyncDriver) -> None:
    with pytest.raises(LockNotOwned), driver.entered(lock("ctx-lost", auto_renew=False)):
        get_lock_manager().release("ctx-lost")


def _fail_after_losing(driver: SyncDriver, name: str) -> None:
    with driver.entered(lock(name, auto_renew=False)):
        get_lock_manager().release(name)
        raise KeyError("boom")


def test_exception_in_block_is_not_masked_by_a_lost_lock(driver: SyncDriver) -> None:
    with pytest.raises(KeyError):
        _fail_after_losing(driver, "ctx-error")


def test_ownership_belongs_to_the_object_not_the_thread_or_task(driver: SyncDriver) -> None:
    held = lock("handed-over")
    # Taken in another thread (each async call is a task of its own, too) ...
    assert start(lambda: driver.acquire(held)).result(5)
    assert driver.owned(held)  # ... this one may use it and another release it.
    start(lambda: driver.release(held)).result(5)
    assert not driver.locked(held)


def test_lease_is_finite_and_lives_on_the_server(redis_client: redis.Redis) -> None:
    held = lock("ttl-default")
    held.acquire()
    assert 29_000 < redis_client.pttl(keys("ttl-default").lock) <= 30_000
    held.release()
    with override_settings(REDIS_LOCK={"TIMEOUT": 4.5}):
        other = lock("ttl-setting")
        other.acquire()
        assert 4_000 < redis_client.pttl(keys("ttl-setting").lock) <= 4_500
        other.release()


def test_owner_metadata_names_host_pid_thread_and_label(redis_client: redis.Redis) -> None:
    held = lock("meta", label="nightly import")
    done = threading.Event()

    def take() -> None:
        held.acquire()
        done.set()

    thread = threading.Thread(target=take, name="importer-7")
    thread.start()
    assert done.wait(5)
    thread.join(5)
    info = get_lock_manager().get("meta")
    assert info is not None
    assert socket.gethostname() in info.owner
    assert f"pid {os.getpid()}" in info.owner
    assert "importer-7" in info.owner
    assert info.label == "nightly import"
    assert info.fencing_token == held.fencing_token
    seconds, micros = redis_client.time()
    server_now = seconds + micros / 1e6
    assert abs(info.acquired_at.timestamp() - server_now) < 1
    assert info.acquired_at.utcoffset() is not None
    assert not info.acquired_at.utcoffset()
    held.release()  # ownership is the object's, not the thread's


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (None, TypeError),
        (b"bytes", TypeError),
        (42, TypeError),
        ("", ValueError),
        ("x" * (MAX_NAME_LENGTH + 1), ValueError),
    ],
)
def test_bad_names_are_refused(name: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="name"):
        lock(name)  # type: ignore[arg-type]


def test_names_with_braces_and_glob_characters_work() -> None:
    names = ["{user}:1", "a*b?c[d]", "}{", "x" * MAX_NAME_LENGTH, "ünïcode ☃"]
    held = [lock(name) for name in names]
    for each in held:
        assert each.acquire(blocking=False)
    for name in names:
        assert not lock(name, blocking=False).acquire()
        assert get_lock_manager().get(name) is not None
    for each in held:
        each.release()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": math.inf}, ValueError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"timeout": "30"}, TypeError, "timeout"),
        ({"timeout": True}, TypeError, "timeout"),
        ({"blocking_timeout": -0.5}, ValueError, "blocking_timeout"),
        ({"blocking_timeout": math.inf}, ValueError, "None"),
        ({"blocking_timeout": "1"}, TypeError, "blocking_timeout"),
        ({"auto_renew": "yes"}, TypeError, "auto_renew"),
        ({"blocking": 1}, TypeError, "blocking"),
        ({"reentrant": None}, TypeError, "reentrant"),
        ({"label": 5}, TypeError, "label"),
        ({"using": 5}, TypeError, "using"),
    ],
)
def test_bad_options_are_refused(options: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        lock("opts", **options)  # type: ignore[arg-type]


def test_bad_arguments_to_methods_are_refused(driver: SyncDriver) -> None:
    held = lock("args")
    with pytest.raises(ValueError, match="blocking_timeout"):
        driver.acquire(held, blocking_timeout=-1)
    driver.acquire(held)
    with pytest.raises(ValueError, match="additional_time"):
        driver.extend(held, 0)
    with pytest.raises(TypeError, match="additional_time"):
        driver.extend(held, "5")  # type: ignore[arg-type]
    assert driver.owned(held)  # a refused call loses nothing
    driver.release(held)


def test_settings_timeout_is_validated_at_use() -> None:
    with override_settings(REDIS_LOCK={"TIMEOUT": 0}), pytest.raises(ValueError, match="TIMEOUT"):
        lock("settings")


def test_inner_release_of_a_lost_reentrant_lock_raises(driver: SyncDriver) -> None:
    held = lock("nested-lost", reentrant=True, auto_renew=False)
    driver.acquire(held)
    driver.acquire(held)
    get_lock_manager().release("nested-lost")
    assert not driver.owned(held)  # finds out it was lost
    with pytest.raises(LockNotOwned):
        driver.release(held)


def test_a_failing_signal_receiver_neither_breaks_acquire_nor_leaves_a_lock(
    caplog: pytest.LogCaptureFixture, driver: SyncDriver
) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    signals.lock_acquired.connect(broken, weak=False)
    try:
        with driver.entered(lock("robust")) as held:
            assert driver.owned(held)
    finally:
        signals.lock_acquired.disconnect(broken)
    assert not lock("robust").locked()
    assert "receiver bug" in caplog.text


def test_timeouts_above_a_year_are_refused(driver: SyncDriver) -> None:
    with pytest.raises(ValueError, match="up to"):
        lock("forever", timeout=1e14)
    held = lock("forever")
    driver.acquire(held)
    with pytest.raises(ValueError, match="up to"):
        driver.extend(held, MAX_TIMEOUT + 1)
    driver.release(held)


def test_name_that_is_not_valid_unicode_is_refused() -> None:
    with pytest.raises(ValueError, match="Unicode"):
        lock("bad \udc80 name")


# -- a hold that ended in Redis is not trusted locally (issue 9) -------------------------------


def test_a_force_released_reentrant_lock_is_not_entered_again(driver: SyncDriver) -> None:
    held = lock("reentry", reentrant=True, auto_renew=False)
    assert driver.acquire(held)
    get_lock_manager().release("reentry")  # an operator frees it...
    other = lock("reentry", auto_renew=False)
    assert driver.acquire(other, blocking=False)  # ...and someone else takes it
    assert not driver.acquire(held, blocking=False)  # not a re-entry: the hold ended
    assert held.lost
    assert driver.owned(other)
    driver.release(other)


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_second_acquire_after_the_lease_ran_out_acquires_afresh(
    driver: SyncDriver, reentrant: bool
) -> None:
    held = lock("lapsed", timeout=0.05, auto_renew=False, reentrant=reentrant)
    assert driver.acquire(held)
    first = held.fencing_token
    wait_until(lambda: not driver.locked(held))
    assert driver.acquire(held, blocking=False)  # no "already holds": nobody holds it
    assert held.fencing_token is not None
    assert first is not None
    assert held.fencing_token > first
    driver.release(held)  # one release ends the new hold
    assert not driver.locked(held)


def test_reentry_renews_the_lease(driver: SyncDriver) -> None:
    held = lock("renewed-on-entry", timeout=10, auto_renew=False, reentrant=True)
    driver.acquire(held)
    driver.extend(held, 1, replace_ttl=True)
    assert driver.acquire(held)
    assert 9 < driver.ttl(held) <= 10  # type: ignore[operator]
    driver.release(held)
    driver.release(held)


@pytest.mark.parametrize(
    ("lock_options", "acquire_options"),
    [
        ({"blocking": False, "blocking_timeout": 5}, None),
        ({}, {"blocking": False, "blocking_timeout": 5}),
        ({"blocking": False}, {"blocking_timeout": 5}),
    ],
)
def test_not_blocking_with_a_time_to_wait_is_refused(
    lock_options: dict[str, Any], acquire_options: dict[str, Any] | None, driver: SyncDriver
) -> None:
    def take() -> None:
        driver.acquire(lock("contradiction", **lock_options), **(acquire_options or {}))

    with pytest.raises(ValueError, match="blocking=False"):
        take()
    assert not lock("contradiction").locked()


def test_not_blocking_with_no_time_to_wait_is_fine(driver: SyncDriver) -> None:
    assert driver.acquire(lock("fine", blocking=False, blocking_timeout=0))
    waits = lock("fine-too", blocking_timeout=5)
    assert driver.acquire(waits, blocking=False)  # acquire's blocking overrides lock()'s
    driver.release(waits)


def test_a_blocking_acquire_in_a_running_event_loop_is_refused() -> None:
    async def main() -> None:
        held = lock("in-loop")
        with pytest.raises(RuntimeError, match="aacquire"):
            held.acquire()
        with pytest.raises(RuntimeError, match="aacquire"):
            held.acquire(blocking_timeout=1)
        with pytest.raises(RuntimeError, match="aacquire"), held:
            pass
        assert not await held.alocked()  # a refused call takes nothing
        assert held.acquire(blocking=False)  # never waits: allowed
        assert await held.aowned()
        await held.arelease()

    asyncio.run(main())


# -- release is idempotent for its own hold (issue 9) ------------------------------------------


def test_a_release_retried_after_its_reply_was_lost_succeeds_quietly(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # redis-py retries a timeout once (redis-py 8 clients built by Redis() retry by default)
    options = {
        "connection_class": FaultyConnection,
        "retry": Retry(NoBackoff(), 1),
        "retry_on_error": [redis.TimeoutError],
    }
    with (
        builtin_cache_with(redis_url, **options) as alias,
        received(signals.lock_lost) as lost,
        received(signals.lock_released) as released,
    ):
        held = lock("retried", using=alias, auto_renew=False)
        assert held.acquire()
        FaultyConnection.lose_reply = True  # Redis runs the release; its reply is lost
        with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
            held.release()  # the retry finds the lock released by this very hold
        assert not FaultyConnection.lose_reply  # the fault did happen
        assert not held.lost
        assert not held.locked()
    assert lost == []
    assert len(released) == 1
    assert not caplog.records


def test_a_release_by_another_hold_is_still_refused_after_a_release(driver: SyncDriver) -> None:
    first = lock("no-reuse", auto_renew=False)
    driver.acquire(first)
    driver.release(first)
    second = lock("no-reuse", auto_renew=False)
    driver.acquire(second)
    with pytest.raises(LockNotOwned):
        driver.release(first)  # its own hold ended; the current one is second's
    assert driver.owned(second)
    get_lock_manager().release("no-reuse")
    with pytest.raises(LockNotOwned):
        driver.release(second)  # force-released: that is a loss, not a retry
    assert second.lost


def test_labels_have_a_maximum_and_owners_are_cut() -> None:
    assert lock("label", label="x" * MAX_LABEL_LENGTH).label == "x" * MAX_LABEL_LENGTH
    with pytest.raises(ValueError, match=str(MAX_LABEL_LENGTH)):
        lock("label", label="x" * (MAX_LABEL_LENGTH + 1))

    def take() -> None:
        held = lock("long-owner", auto_renew=False)
        held.acquire()

    thread = threading.Thread(target=take, name="t" * 10_000)  # thread names are free text
    thread.start()
    thread.join(5)
    info = get_lock_manager().get("long-owner")
    assert info is not None
    assert len(info.owner) == 256
    assert info.owner.startswith(f"{socket.gethostname()} pid {os.getpid()} thread ttt")


def test_a_second_acquire_of_a_lock_without_expiry_changes_nothing(
    redis_client: redis.Redis, driver: SyncDriver
) -> None:
    held = lock("persisted", auto_renew=False)
    driver.acquire(held)
    key = keys("persisted").lock
    redis_client.persist(key)  # by hand: the key lost its expiry
    with pytest.raises(LockError):
        driver.acquire(held, blocking=False)  # still held: the question changed nothing
    assert redis_client.pttl(key) == -1
    driver.release(held)


def test_ttl_of_a_held_lock_without_expiry_is_infinite(redis_client: redis.Redis) -> None:
    held = lock("no-expiry", auto_renew=False)
    held.acquire()
    redis_client.persist(keys("no-expiry").lock)  # by hand: the key lost its expiry
    assert held.ttl() == math.inf
    held.release()
    assert held.ttl() is None


# -- a grant that came too late is given back, and a blocking acquire goes on (issue 20) -------


def test_a_blocking_acquire_goes_on_after_a_late_grant(
    redis_server: RedisServer, driver: SyncDriver
) -> None:
    with lock("late"):  # connected, and the script known
        pass
    attempt = lock("late", timeout=0.25, auto_renew=False)
    redis_server.pause()
    try:
        got = start(lambda: driver.acquire(attempt, blocking_timeout=8))
        wait_for_unread_request(redis_server.port)
        time.sleep(0.6)  # the fault itself: Redis frozen for longer than the lease
    finally:
        redis_server.resume()
    assert got.result(CALL_SECONDS) is True  # not LockUnavailable: it had time to wait
    assert driver.owned(attempt)
    assert 0 < (driver.ttl(attempt) or 0) <= 0.25  # a fresh lease of its own
    driver.release(attempt)


def test_a_redis_restarted_between_two_calls_is_reconnected(
    redis_server: RedisServer, driver: SyncDriver
) -> None:
    """A pooled connection that died while idle (Redis restarted since the last call) is
    replaced, and the call goes through, for the blocking and the async API alike."""
    with driver.entered(lock("before-restart")):  # connections made, then left idle
        pass
    redis_server.kill()
    redis_server.start()
    held = lock("after-restart", auto_renew=False)
    assert driver.acquire(held)
    driver.extend(held, 5)
    driver.release(held)
