"""The watchdog: renews held locks, stops at release, reports losses, survives fork."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import pytest
import redis
from django.test import override_settings

from django_redis_lock import LockNotOwned, LockUnavailable, get_lock_manager, lock, signals
from testproject.redis_server import RedisServer, RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import (
    FaultyConnection,
    WatchdogThread,
    builtin_cache_with,
    commandstats,
    fork_is_the_point,
    held_past_first_lease,
    keys,
    received,
    wait_until,
)


def test_watchdog_keeps_a_lock_past_three_leases() -> None:
    held = lock("long-report", timeout=0.3)
    assert held.acquire()
    started = time.monotonic()
    while time.monotonic() - started < 1.0:  # more than three leases of 0.3 s
        assert not lock("long-report", blocking=False).acquire()
        time.sleep(0.05)
    assert held.owned()
    assert not held.lost
    held.release()
    assert not held.locked()


def test_no_renewal_after_release(redis_client: redis.Redis) -> None:
    held = lock("renewed", timeout=0.15)
    held.acquire()
    held.release()
    redis_client.config_resetstat()
    time.sleep(0.3)  # two renewal intervals: a renewal would show up as an EVALSHA
    assert "evalsha" not in commandstats(redis_client)


def test_watchdog_reports_a_lost_lock(caplog: pytest.LogCaptureFixture) -> None:
    lost = threading.Event()
    received: dict[str, Any] = {}

    def on_lost(**kwargs: Any) -> None:
        received.update(kwargs)
        lost.set()

    signals.lock_lost.connect(on_lost, weak=False)
    try:
        with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
            held = lock("stolen", timeout=0.3)
            held.acquire()
            token = held.fencing_token
            get_lock_manager().release("stolen")  # an operator clears it
            assert lost.wait(2)
    finally:
        signals.lock_lost.disconnect(on_lost)
    assert held.lost
    assert not held.owned()
    assert received["name"] == "stolen"
    assert received["fencing_token"] == token
    assert received["lock"] is held
    assert any("stolen" in record.getMessage() for record in caplog.records)
    with pytest.raises(LockNotOwned):
        held.release()


def test_dropped_lock_object_is_not_renewed_forever(redis_client: redis.Redis) -> None:
    held = lock("forgotten", timeout=0.2)
    held.acquire()
    key = keys("forgotten").lock
    del held  # never released: the watchdog must not keep it alive
    wait_until(lambda: not redis_client.hexists(key, "s"), timeout=2)


@fork_is_the_point  # what a forked child inherits of the watchdog
def test_child_process_never_renews_the_parents_locks() -> None:
    held = lock("parent-only", timeout=0.3)
    held.acquire()
    report, reported = os.pipe()  # child to parent: how its own lock fared
    go, went = os.pipe()  # parent to child: done looking, the child may end
    pid = os.fork()
    if pid == 0:  # the child: hold its own lock until the parent has looked, then report
        code = 1
        try:
            child_lock = lock("child-own", timeout=0.2)
            child_lock.acquire()
            started = time.monotonic()
            os.read(go, 1)
            time.sleep(max(0.0, 0.8 - (time.monotonic() - started)))  # four leases at least
            code = 0 if child_lock.owned() and not child_lock.lost else 2
            child_lock.release()
        finally:
            os.write(reported, bytes([code]))
            os._exit(0)
    os.close(reported)
    os.close(go)
    try:
        # The parent drops its Lock unreleased, so it stops renewing it: only a child could now
        # (the child's copy of the Lock lives on, and its watchdog would find the hold there).
        del held
        wait_until(lambda: not lock("parent-only").locked(), timeout=2)  # the child lives on
    finally:
        os.write(went, b"1")
        result = os.read(report, 1)
        os.waitpid(pid, 0)
        os.close(report)
        os.close(went)
    assert result == bytes([0])  # the child's own watchdog worked


def test_a_lock_taken_and_released_in_a_loop_rarely_wakes_the_watchdog() -> None:
    with lock("starts-the-thread"):
        pass
    thread = WatchdogThread()
    thread.settle()  # its loop runs
    before, started = thread.sleeps(), time.monotonic()
    for _ in range(50):
        with lock("hot-loop", timeout=30):
            pass
        thread.settle()  # it handles any wake-up call and sleeps again before the next hold
    looks_of_its_own = 1 + int(time.monotonic() - started)  # one a second at most
    # Each hold is due after the thread's next look on its own: none needs a wake-up call. A
    # wake-up per hold shows as 50 sleeps or more (about 130 measured); the thread's own looks
    # and waits for the GIL, on a machine busy with other tests, as a few.
    assert thread.sleeps() - before < 25 + 2 * looks_of_its_own


@pytest.mark.slow
def test_a_hold_registered_without_the_lock_is_renewed_in_time() -> None:
    with lock("starts-the-thread"):
        pass
    thread = WatchdogThread()
    # Handed over without waking the thread. A look of its own may still fall in the window
    # (the thread's tick is not observable apart from other wake-ups): a few tries, each with a
    # hold of its own; a hand-over that woke the thread would wake it on every try.
    for attempt in range(3):
        thread.after_a_look_of_its_own()  # its next look is about a second away
        before = thread.sleeps()
        held = lock(f"registered-lock-free-{attempt}", timeout=3)  # renewed after 1 s
        assert held.acquire()
        thread.settle()
        if thread.sleeps() == before:
            break
        held.release()
    assert thread.sleeps() == before
    time.sleep(3.5)  # longer than the lease: only renewals keep it
    assert held.owned()
    held.release()


def test_a_short_lease_after_long_ones_is_renewed_in_time() -> None:
    for _ in range(50):  # long holds, handed to the thread without a wake-up call
        with lock("long-lease", timeout=30):
            pass
    held = lock("short-lease", timeout=0.3)
    assert held.acquire()
    time.sleep(1.0)  # more than three leases of 0.3 s
    assert held.owned()
    held.release()


def test_one_watchdog_thread_renews_every_lock() -> None:
    # A lease of a second: renewed at a third of it, so a loaded machine may delay a renewal
    # by up to two thirds of a second (0.3 s leases failed once in six loaded full runs).
    held = [lock(f"many:{i}", timeout=1.0) for i in range(10)]
    for each in held:
        each.acquire()
    watchdogs = [t for t in threading.enumerate() if t.name == "django_redis_lock-watchdog"]
    assert len(watchdogs) == 1
    time.sleep(1.3)  # the passing of a lease, and more: all ten must have been renewed
    assert all(each.owned() for each in held)
    for each in held:
        each.release()


def test_lock_is_reported_lost_when_redis_stalls_past_the_lease(
    redis_factory: RedisServerGroup,
) -> None:
    server = redis_factory()
    caches = build_caches(server.url)
    caches["default"]["OPTIONS"]["SOCKET_TIMEOUT"] = 0.1
    lost = threading.Event()

    def on_lost(**kwargs: Any) -> None:
        lost.set()

    signals.lock_lost.connect(on_lost, weak=False)
    try:
        with override_settings(CACHES=caches):
            held = lock("stalled", timeout=0.4)
            held.acquire()
            server.pause()  # renewals time out; the lease runs out meanwhile
            try:
                assert lost.wait(3)
            finally:
                server.resume()
            assert held.lost
            with pytest.raises(LockNotOwned):
                held.release()
    finally:
        signals.lock_lost.disconnect(on_lost)


def test_a_failing_lock_lost_receiver_does_not_stop_the_watchdog() -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.lock_lost.connect(broken, weak=False)
    try:
        first = lock("first-loss", timeout=0.3)
        first.acquire()
        get_lock_manager().release("first-loss")
        wait_until(lambda: first.lost, timeout=2)
    finally:
        signals.lock_lost.disconnect(broken)
    second = lock("still-renewed", timeout=0.3)
    second.acquire()
    time.sleep(0.6)  # two leases: only a live watchdog keeps it
    assert second.owned()
    second.release()


def test_a_renewal_that_fails_unexpectedly_ends_in_lost_once_the_lease_is_over(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        builtin_cache_with(redis_url, connection_class=FaultyConnection) as alias,
        received(signals.lock_lost) as lost,
        caplog.at_level(logging.WARNING, logger="django_redis_lock"),
    ):
        held = lock("unconfirmed", using=alias, timeout=0.3)
        held.acquire()
        token = held.fencing_token
        # Not a Redis error (another client library's, a bug): still not a renewal.
        FaultyConnection.fail_send = RuntimeError("injected")
        try:
            wait_until(lambda: held.lost, timeout=3)
        finally:
            FaultyConnection.fail_send = None
        assert not held.locked()  # lost only once the lease was over
        with pytest.raises(LockNotOwned):
            held.release()
    assert [call["fencing_token"] for call in lost] == [token]
    assert "before its lease ended" in caplog.text


def test_an_attempt_redis_runs_after_its_caller_gave_up_is_given_back(
    redis_server: RedisServer, redis_url: str
) -> None:
    with builtin_cache_with(redis_url, socket_timeout=0.5) as alias:
        warm = lock("ghost", using=alias)  # the pool has a connection: the attempt goes out
        warm.acquire()
        warm.release()
        attempt = lock("ghost", using=alias, timeout=30, auto_renew=False)
        redis_server.pause()
        try:
            with pytest.raises(LockUnavailable):
                attempt.acquire(blocking=False)  # times out, but sits in Redis's socket
        finally:
            redis_server.resume()  # Redis grants the lock to a secret nobody holds
        resumed = time.monotonic()
        other = lock("ghost", using=alias, timeout=30, auto_renew=False)
        wait_until(lambda: other.acquire(blocking=False), timeout=3)  # not after 30 s
        assert time.monotonic() - resumed < 3
        assert not attempt.owned()
        other.release()


def test_a_release_redis_could_not_answer_is_finished_once_redis_is_back(
    redis_server: RedisServer, redis_url: str, redis_client: redis.Redis
) -> None:
    with builtin_cache_with(redis_url, socket_timeout=0.5) as alias:
        warm = lock("unfinished", using=alias)  # the pool has a connection
        warm.acquire()
        warm.release()
        held = lock("unfinished", using=alias, timeout=30, auto_renew=False)
        held.acquire()
        # The release needs a new connection, whose handshake times out: it is never sent.
        redis_client.client_kill_filter(_type="normal", skipme=True)
        redis_server.pause()
        try:
            with pytest.raises(LockUnavailable):
                held.release()
        finally:
            redis_server.resume()
        anyone = lock("unfinished", using=alias)
        wait_until(lambda: not anyone.locked(), timeout=3)  # released, not after 30 s
        held.release()  # a retry by the holder: its own hold, released already, quietly
        assert not held.lost
        assert anyone.acquire(blocking=False)
        anyone.release()


def test_a_release_racing_the_threads_intake_does_not_end_the_thread() -> None:
    """A release takes its hold out of the thread's intake without the thread's lock: between
    the thread seeing a hold there and taking it, the hold may be gone."""
    from django_redis_lock.runtime import runtime

    class Raced(dict):  # type: ignore[type-arg]
        """Looks like it still holds the hold a release has just taken out."""

        def __len__(self) -> int:
            return 1

    watchdog = runtime().watchdog
    # The race is a few bytecodes wide: only a stand-in intake makes it happen on every run.
    intake, watchdog._incoming = watchdog._incoming, Raced()
    try:
        # The thread looks at its intake before each renewal: still renewing, it survived.
        held_past_first_lease("after-the-race").release()
    finally:
        watchdog._incoming = intake
