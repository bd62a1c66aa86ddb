"""lock_many on one server: all or none in one round trip, FIFO waiting, fencing, renewals,
losses reported for the set, bad input refused before any round trip."""

from __future__ import annotations

import io
import threading
import time

import pytest
import redis
from django.core.management import call_command

from django_redis_lock import LockBusy, LockNotOwned, MultiLock, get_lock_manager, lock, lock_many
from django_redis_lock.runtime import runtime
from django_redis_lock.signals import lock_busy, lock_lost, lock_released
from django_redis_lock.testing import pause_renewals
from django_redis_lock.validation import MAX_LABEL_LENGTH
from tests.helpers import (
    SyncDriver,
    counted_caches,
    received,
    round_trips,
    staff_client,
    start,
    wait_until,
)
from tests.many import scenarios
from tests.many.scenarios import call


def test_all_or_none(driver: SyncDriver) -> None:
    scenarios.all_or_none(driver)


def test_fencing_tokens_increase_per_name(driver: SyncDriver) -> None:
    scenarios.tokens_increase(driver)


def test_waits_for_the_busy_name_and_times_out_holding_nothing(driver: SyncDriver) -> None:
    scenarios.waits_and_times_out(driver)


def test_opposite_orders_never_deadlock_nor_overlap() -> None:
    scenarios.opposite_orders(500)


def test_async_with() -> None:
    scenarios.run_async_with()


def test_one_round_trip_each_way(redis_url: str) -> None:
    with counted_caches(redis_url):
        with lock_many(["warm-up", "o0"]):  # loads the scripts
            pass
        many = lock_many(["o1", "o2", "o3"])
        with round_trips() as acquire_trips:
            assert many.acquire()
        with round_trips() as release_trips:
            many.release()
    assert (acquire_trips, release_trips) == ([1], [1])


def test_waiting_is_fifo_behind_a_queued_single_lock(redis_client: redis.Redis) -> None:
    """A name with a waiter queued is busy for the set's one script: the waiter goes first."""
    holder = lock("f1")
    assert holder.acquire()
    waiter = lock("f1")
    first = start(lambda: waiter.acquire(blocking_timeout=10))
    wait_until(lambda: redis_client.zcard(holder._keys.queue) == 1)
    many = lock_many(["f1", "f2"])
    later = start(lambda: many.acquire(blocking_timeout=10))
    wait_until(lambda: redis_client.zcard(holder._keys.queue) == 2)
    holder.release()
    assert first.result(5) is True
    assert not later.done()
    waiter.release()
    assert later.result(5) is True
    many.release()


def test_with_releases_and_busy_raises() -> None:
    with lock_many(["w1", "w2"]) as many:
        assert lock("w2").locked()
        with pytest.raises(LockBusy, match="w1"), lock_many(["w1", "w3"], blocking=False):
            pass
        assert not lock("w3").locked()
    assert not many.fencing_tokens
    assert not lock("w1").locked()


def test_the_watchdog_renews_every_name() -> None:
    many = lock_many(["n1", "n2", "n3"], timeout=0.3)
    assert many.acquire()
    time.sleep(0.9)  # three leases: only renewals keep them
    assert all(lock(name).locked() for name in ("n1", "n2", "n3"))
    many.release()


def test_a_lost_name_is_reported_for_the_set() -> None:
    many = lock_many(["l1", "l2", "l3"], timeout=0.5)
    with received(lock_lost) as lost:
        assert many.acquire()
        assert get_lock_manager().release("l2")
        assert runtime().watchdog.check_now()
        wait_until(lambda: many.lost)
    assert [each["lock"] for each in lost] == [many]
    assert lost[0]["name"] == "l1, l2, l3"
    with pytest.raises(LockNotOwned):
        many.release()


def test_extend_and_a_release_after_a_force_release(driver: SyncDriver) -> None:
    many = lock_many(["e1", "e2"], timeout=1, auto_renew=False)
    assert call(driver, many, "acquire")
    call(driver, many, "extend", 10)
    ttl = lock("e1").ttl()
    assert ttl is not None
    assert ttl > 5
    assert get_lock_manager().release("e2")
    with pytest.raises(LockNotOwned, match="e2"):
        call(driver, many, "release")
    assert many.lost
    assert not lock("e1").locked()


def test_listing_shows_the_other_names_of_the_set() -> None:
    with lock_many(["s1", "s2", "s3"], label="nightly"):
        labels = {info.name: info.label for info in get_lock_manager().list("s*")}
    assert labels == {
        "s1": "nightly (held with s2, s3)",
        "s2": "nightly (held with s1, s3)",
        "s3": "nightly (held with s1, s2)",
    }


def test_locks_list_shows_each_name_with_the_others_of_its_set() -> None:
    out = io.StringIO()
    with lock_many(["s1", "s2"]):
        call_command("locks", "list", "--pattern", "s*", stdout=out)
    text = out.getvalue()
    assert "held with s2" in text
    assert "held with s1" in text


@pytest.mark.parametrize(
    ("names", "error", "message"),
    [
        ("abc", TypeError, "list, tuple or set"),
        (None, TypeError, "list, tuple or set"),
        ([], ValueError, "at least one"),
        (["a", "b", "a"], ValueError, "repeat a lock name: 'a'"),
        (["a", ""], ValueError, "empty"),
        (["a", 3], TypeError, "name"),
    ],
)
def test_bad_names_are_refused_before_any_round_trip(
    redis_url: str, names: object, error: type[Exception], message: str
) -> None:
    with counted_caches(redis_url), round_trips() as trips, pytest.raises(error, match=message):
        lock_many(names)
    assert trips == [0]


def test_names_are_sorted_and_shown() -> None:
    many = lock_many({"b", "c", "a"})
    assert isinstance(many, MultiLock)
    assert many.names == ("a", "b", "c")
    assert repr(many) == "<MultiLock ['a', 'b', 'c'] not held>"


def test_names_taken_while_waiting_for_the_next_are_kept_alive() -> None:
    """Waiting for a busy name longer than a taken name's lease: the watchdog keeps it."""
    other = lock("k2", timeout=5)
    assert other.acquire()
    releaser = threading.Timer(1.0, other.release)  # the holder's work outlasts k1's lease
    releaser.start()
    many = lock_many(["k1", "k2"], timeout=0.3)
    assert many.acquire(blocking_timeout=5)
    releaser.join()
    assert lock("k1").locked()
    many.release()  # LockNotOwned if k1 had expired meanwhile


def test_the_release_hands_each_name_to_its_own_waiter(redis_client: redis.Redis) -> None:
    many = lock_many(["h1", "h2", "h3"])
    assert many.acquire()
    tokens = dict(many.fencing_tokens)
    first, second = lock("h1"), lock("h3")
    got_first = start(lambda: first.acquire(blocking_timeout=10))
    got_second = start(lambda: second.acquire(blocking_timeout=10))
    wait_until(lambda: redis_client.exists(first._keys.queue, second._keys.queue) == 2)
    with received(lock_released) as released:
        many.release()
    assert [each["lock"] for each in released] == [many]
    assert got_first.result(5) is True
    assert got_second.result(5) is True
    assert first.fencing_token is not None
    assert first.fencing_token > tokens["h1"]
    assert not lock("h2").locked()
    first.release()
    second.release()


@pytest.mark.django_db
def test_the_admin_shows_each_name_with_the_others_of_its_set() -> None:
    with lock_many(["ad1", "ad2"], label="<b>nightly</b>"):
        page = staff_client("view_lock").get("/admin/django_redis_lock/lock/").content.decode()
    assert "held with ad2" in page
    assert "held with ad1" in page
    assert "<b>nightly" not in page  # shown as text, escaped


def test_lock_busy_is_sent_once_for_the_set() -> None:
    with lock("u2"), received(lock_busy) as busy:
        assert not lock_many(["u1", "u2"]).acquire(blocking_timeout=0.2)
    assert [each["name"] for each in busy] == ["u1, u2"]
    assert not lock("u1").locked()


def test_a_busy_set_with_no_time_to_wait_takes_nothing(redis_client: redis.Redis) -> None:
    """blocking_timeout=0 (@locked's default) is one try: the free names are not taken one by
    one and given back (their tokens would move, a lock of theirs would meet them busy)."""
    other = lock("z2")
    assert other.acquire()
    many = lock_many(["z1", "z2"])
    assert not many.acquire(blocking_timeout=0)
    assert redis_client.exists(lock("z1")._keys.lock) == 0  # never taken: no tombstone
    assert many.busy_name == "z2"
    other.release()


def test_names_taken_one_by_one_start_with_a_whole_lease(redis_client: redis.Redis) -> None:
    """The first name was taken before the set waited for the second: once the set has them
    all, each has the set's whole lease again, as a lock's acquire gives it."""
    busy = lock("w2", timeout=60)
    assert busy.acquire()
    many = lock_many(["w1", "w2"], timeout=3, auto_renew=False)
    with pause_renewals():  # w1 is not renewed while the set waits: its lease runs down
        waiting = start(lambda: many.acquire(blocking_timeout=10))
        queue = lock("w2")._keys.queue
        wait_until(lambda: redis_client.zcard(queue) == 1)
        wait_until(lambda: redis_client.pttl(lock("w1")._keys.lock) < 1500, timeout=5)
        busy.release()
        assert waiting.result(10) is True
    assert redis_client.pttl(lock("w1")._keys.lock) > 2500
    assert redis_client.pttl(lock("w2")._keys.lock) > 2500  # not the hand-over's short lease
    many.release()


def test_a_set_of_many_long_names_records_labels_of_a_bounded_length() -> None:
    names = [f"n{index:02d}-" + "x" * 200 for index in range(20)]
    with lock_many(names, label="job"):
        labels = {info.label for info in get_lock_manager().list("n*")}
    assert labels
    assert all(label is not None and len(label) <= MAX_LABEL_LENGTH for label in labels)
    assert all(label is not None and label.startswith("job (held with n") for label in labels)
