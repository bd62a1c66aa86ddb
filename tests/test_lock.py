"""The Lock API against a real Redis: ownership, round trips, extend, validation, metadata."""

from __future__ import annotations

import math
import os
import socket
import threading

import pytest
import redis
from django.test import override_settings

from django_redis_lock import (
    MAX_NAME_LENGTH,
    MAX_TIMEOUT,
    LockBusy,
    LockError,
    LockNotOwned,
    get_lock_manager,
    lock,
    signals,
)
from tests.helpers import commandstats, counted_caches, round_trips, wait_until


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
    # Inside the scripts: only release looks for waiters; acquire sees the tombstone.
    assert stats["exists"] == 10


@pytest.mark.parametrize("alias", ["default", "builtin"])
def test_scripts_are_loaded_again_after_the_server_forgets_them(
    redis_client: redis.Redis, alias: str
) -> None:
    with lock("warm-up", using=alias):
        pass
    redis_client.script_flush()  # as after a restart or a failover to a fresh replica
    held = lock("job", using=alias)
    assert held.acquire()
    redis_client.script_flush()
    held.extend(5)
    redis_client.script_flush()
    held.release()
    assert not held.locked()


def test_second_holder_is_refused_until_release() -> None:
    first, second = lock("report"), lock("report", blocking=False)
    assert first.acquire()
    assert first.owned()
    assert first.locked()
    assert not second.acquire()
    assert second.locked()
    assert not second.owned()
    first.release()
    assert not first.locked()
    assert second.acquire()
    second.release()


def test_release_without_holding_raises() -> None:
    never = lock("never")
    with pytest.raises(LockNotOwned):
        never.release()
    held = lock("twice")
    held.acquire()
    held.release()
    with pytest.raises(LockNotOwned):
        held.release()


def test_second_acquire_by_the_holder_raises_at_once() -> None:
    held = lock("single")
    held.acquire()
    with pytest.raises(LockError, match="reentrant=True"):
        held.acquire(blocking_timeout=5)
    held.release()


def test_reentrant_lock_needs_one_release_per_acquire() -> None:
    held = lock("nested", reentrant=True)
    assert held.acquire()
    assert held.acquire()
    token = held.fencing_token
    held.release()
    assert held.owned()
    assert held.fencing_token == token
    assert not lock("nested", blocking=False).acquire()
    held.release()
    assert not held.locked()
    with pytest.raises(LockNotOwned):
        held.release()


def test_stale_holder_cannot_release_or_extend_the_next_holders_lock() -> None:
    stale = lock("invoice", timeout=0.05, auto_renew=False)
    assert stale.acquire()
    wait_until(lambda: not stale.locked())
    fresh = lock("invoice", auto_renew=False)
    assert fresh.acquire()
    with pytest.raises(LockNotOwned):
        stale.extend()
    assert stale.lost
    with pytest.raises(LockNotOwned):
        stale.release()
    assert fresh.owned()
    fresh.release()


def test_extend_adds_or_replaces_the_lease() -> None:
    held = lock("extend", timeout=10, auto_renew=False)
    held.acquire()
    held.extend(20)
    assert 29 < held.ttl() <= 30  # type: ignore[operator]
    held.extend(5, replace_ttl=True)
    assert 4 < held.ttl() <= 5  # type: ignore[operator]
    held.extend()
    assert 14 < held.ttl() <= 15  # type: ignore[operator]
    held.release()
    with pytest.raises(LockNotOwned):
        held.extend()


def test_ttl_is_none_when_nobody_holds_the_lock() -> None:
    held = lock("ttl", timeout=7)
    assert held.ttl() is None
    held.acquire()
    assert 6 < held.ttl() <= 7  # type: ignore[operator]
    held.release()
    assert held.ttl() is None  # the tombstone left behind is not a hold


def test_context_manager_acquires_and_releases() -> None:
    with lock("ctx") as held:
        assert held.owned()
        with pytest.raises(LockBusy), lock("ctx", blocking_timeout=0):
            pass
    assert not held.locked()


def test_clean_exit_from_a_lost_lock_raises() -> None:
    with pytest.raises(LockNotOwned), lock("ctx-lost", auto_renew=False):
        get_lock_manager().release("ctx-lost")


def _fail_after_losing(name: str) -> None:
    with lock(name, auto_renew=False):
        get_lock_manager().release(name)
        raise KeyError("boom")


def test_exception_in_block_is_not_masked_by_a_lost_lock() -> None:
    with pytest.raises(KeyError):
        _fail_after_losing("ctx-error")


def test_lease_is_finite_and_lives_on_the_server(redis_client: redis.Redis) -> None:
    held = lock("ttl-default")
    held.acquire()
    key = held._keys.lock
    assert 29_000 < redis_client.pttl(key) <= 30_000
    held.release()
    with override_settings(REDIS_LOCK={"TIMEOUT": 4.5}):
        other = lock("ttl-setting")
        other.acquire()
        assert 4_000 < redis_client.pttl(other._keys.lock) <= 4_500
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


def test_bad_arguments_to_methods_are_refused() -> None:
    held = lock("args")
    with pytest.raises(ValueError, match="blocking_timeout"):
        held.acquire(blocking_timeout=-1)
    held.acquire()
    with pytest.raises(ValueError, match="additional_time"):
        held.extend(0)
    with pytest.raises(TypeError, match="additional_time"):
        held.extend("5")  # type: ignore[arg-type]
    assert held.owned()  # a refused call loses nothing
    held.release()


def test_settings_timeout_is_validated_at_use() -> None:
    with override_settings(REDIS_LOCK={"TIMEOUT": 0}), pytest.raises(ValueError, match="TIMEOUT"):
        lock("settings")


def test_inner_release_of_a_lost_reentrant_lock_raises() -> None:
    held = lock("nested-lost", reentrant=True, auto_renew=False)
    held.acquire()
    held.acquire()
    get_lock_manager().release("nested-lost")
    assert not held.owned()  # finds out it was lost
    with pytest.raises(LockNotOwned):
        held.release()


def test_a_failing_signal_receiver_neither_breaks_acquire_nor_leaves_a_lock(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    signals.lock_acquired.connect(broken, weak=False)
    try:
        with lock("robust") as held:
            assert held.owned()
    finally:
        signals.lock_acquired.disconnect(broken)
    assert not lock("robust").locked()
    assert "receiver bug" in caplog.text


def test_timeouts_above_a_year_are_refused() -> None:
    with pytest.raises(ValueError, match="up to"):
        lock("forever", timeout=1e14)
    held = lock("forever")
    held.acquire()
    with pytest.raises(ValueError, match="up to"):
        held.extend(MAX_TIMEOUT + 1)
    held.release()


def test_name_that_is_not_valid_unicode_is_refused() -> None:
    with pytest.raises(ValueError, match="Unicode"):
        lock("bad \udc80 name")
