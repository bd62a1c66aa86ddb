"""Lock statistics: recorded by the scripts (bucket boundaries, counters, expiry), read back
(percentiles from known hold times), shown by ``manage.py locks stats``."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_redis_lock import MAX_TIMEOUT, Lock, LockNotOwned, get_lock_manager, lock
from django_redis_lock.backends.base import text_of
from django_redis_lock.scripts import BOUNDS_MS, FIRST_STATS_TTL_MS, STATS_TTL_MS
from django_redis_lock.stats import (
    BUCKETS,
    MIN_SAMPLES,
    LockStats,
    bucket_label,
    bucket_of,
    percentile,
)
from tests.helpers import keys, record_stats, wait_until


def held_for(client: redis.Redis, name: str, micros: int, **options: object) -> Lock:
    """A lock of ``name`` held, whose recorded start is ``micros`` before now (server clock):
    its release records a hold of exactly that long, give or take the release's own time."""
    held = lock(name, auto_renew=False, **options)  # type: ignore[arg-type]
    assert held.acquire()
    seconds, us = client.time()
    client.hset(keys(name).lock, "a", str(seconds * 1_000_000 + us - micros))
    return held


def buckets(client: redis.Redis, name: str, kind: str = "h") -> dict[int, int]:
    fields = {text_of(key): value for key, value in client.hgetall(keys(name).stats).items()}
    return {
        int(key[1:]): int(value)
        for key, value in fields.items()
        if key.startswith(kind) and key[1:].isdigit()
    }


def test_the_scripts_put_values_in_the_buckets_python_computes(redis_client: redis.Redis) -> None:
    """At each bound, just below and just above it: the scripts' bucket is ``bucket_of``'s."""
    from django_redis_lock.scripts.stats import STATS_LUA  # the code every recording script runs

    values = [0, 0.5, *(v for bound in BOUNDS_MS for v in (bound - 0.001, bound, bound + 0.5))]
    each = "for i, v in ipairs(ARGV) do out[i] = bucket(tonumber(v)) end"
    script = f"{STATS_LUA}\nlocal out = {{}}\n{each}\nreturn out"
    found = redis_client.eval(script, 0, *(repr(value) for value in values))
    assert found == [bucket_of(value) for value in values]
    # Not a number (a start time someone else wrote): the first bucket; past an hour: the last.
    odd = f"{STATS_LUA}\nreturn {{bucket(0/0), bucket(1/0), bucket(1e300)}}"
    assert redis_client.eval(odd, 0) == [0, len(BOUNDS_MS), len(BOUNDS_MS)]


@pytest.mark.parametrize(("micros", "bucket"), [(40_000, "30 ms-50 ms"), (4_200_000, "3 s-5 s")])
def test_a_release_records_the_hold_from_its_start(
    redis_client: redis.Redis, micros: int, bucket: str
) -> None:
    name = f"hold:{micros}"
    held_for(redis_client, name, micros).release()
    (index,) = buckets(redis_client, name)
    assert bucket_label(index) == bucket


def test_the_bounds_are_a_short_log_scale() -> None:
    assert BOUNDS_MS[:6] == (1, 2, 3, 5, 7, 10)
    assert BOUNDS_MS[-1] == 3_600_000
    assert BUCKETS == len(BOUNDS_MS) + 1 < 40
    assert bucket_of(0.5) == 0
    assert bucket_of(1) == 1
    assert bucket_of(3_600_000) == BUCKETS - 1
    assert bucket_label(0) == "< 1 ms"
    assert bucket_label(BUCKETS - 1) == ">= 60 min"
    assert bucket_label(bucket_of(8000)) == "7 s-10 s"


def test_percentiles_from_known_hold_times(redis_client: redis.Redis) -> None:
    """90 holds of about 40 ms, 9 of about 4 s and one of 6.5 s: p50 in 30-50 ms, p99 in
    3-5 s, the longest 6.5 s; the suggestion is twice the p99 plus a second."""
    for micros in [40_000] * 90 + [4_000_000] * 9 + [6_500_000]:
        held_for(redis_client, "known", micros, timeout=30).release()
    stats = get_lock_manager().get_stats("known")
    assert stats is not None
    assert stats.acquisitions == 100
    assert stats.hold_p50 == 0.05
    assert stats.hold_p99 == 5.0
    assert stats.hold_max is not None
    assert 6.5 <= stats.hold_max < 6.6
    assert stats.timeout == 30
    assert stats.suggested_timeout == 11.0
    assert stats.wait_p50 == 0.0  # uncontended acquires wait under a millisecond: the first bucket
    assert stats.warnings == ()


def test_percentile_is_the_bucket_bound_or_the_longest() -> None:
    counts = [0] * BUCKETS
    counts[bucket_of(8000)] = 1
    assert percentile(counts, 0.99, None) == 10.0
    assert percentile(counts, 0.99, 8.2) == 8.2
    assert percentile([0] * BUCKETS, 0.5, None) is None


def test_waits_busy_answers_and_lost_holds_are_counted(redis_client: redis.Redis) -> None:
    holder = lock("counted", timeout=30)
    assert holder.acquire()
    assert not lock("counted").acquire(blocking=False)  # one busy answer
    waiter = lock("counted", blocking_timeout=10)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()))
    thread.start()
    wait_until(lambda: redis_client.zcard(keys("counted").queue))
    time.sleep(0.25)  # the waiter waits this long at least: its wait is recorded at release
    holder.release()
    thread.join(10)
    assert got == [True]
    waiter.release()
    stats = get_lock_manager().get_stats("counted")
    assert stats is not None
    assert (stats.acquisitions, stats.busy, stats.lost) == (2, 2, 0)  # one busy per acquire
    assert stats.waits[0] == 1  # the holder's acquire did not wait (not written: derived)
    (waited,) = [index for index, count in enumerate(stats.waits) if index and count]
    assert BOUNDS_MS[waited - 1] >= 200  # the waiter's wait (at least 0.25 s)
    assert list(buckets(redis_client, "counted", "w")) == [waited]

    expired = lock("counted", timeout=0.1, auto_renew=False)
    assert expired.acquire()
    wait_until(lambda: not redis_client.exists(keys("counted").lock) or not expired.locked())
    with pytest.raises(LockNotOwned):
        expired.release()
    stats = get_lock_manager().get_stats("counted")
    assert stats is not None
    assert stats.lost == 1
    assert any("lost" in warning for warning in stats.warnings)


def test_a_loss_found_by_the_watchdog_is_counted_once(redis_client: redis.Redis) -> None:
    renewed = lock("watched", timeout=0.3)
    assert renewed.acquire()
    redis_client.delete(keys("watched").lock)  # gone, and not by an operator's release
    wait_until(lambda: renewed.lost)
    with pytest.raises(LockNotOwned):
        renewed.release()
    stats = get_lock_manager().get_stats("watched")
    assert stats is not None
    assert (stats.lost, stats.forced) == (1, 0)


def test_holds_an_operator_released_are_counted_apart_and_flag_nothing(
    redis_client: redis.Redis,
) -> None:
    """Found gone by the watchdog, by the holder's release, after a release and a clear: each
    is a forced hold, never a lost one, and the timeout does not look too short (issue 21)."""
    manager = get_lock_manager()
    renewed = lock("forced", timeout=0.3)
    assert renewed.acquire()
    assert manager.release("forced")
    wait_until(lambda: renewed.lost)  # the watchdog's renewal found it gone
    with pytest.raises(LockNotOwned):
        renewed.release()
    held = lock("forced", auto_renew=False)
    assert held.acquire()
    assert manager.clear("forced") == 1
    with pytest.raises(LockNotOwned):
        held.release()  # the holder's release found it gone
    stats = manager.get_stats("forced")
    assert stats is not None
    assert (stats.lost, stats.forced) == (0, 2)
    assert stats.warnings == ()
    out = StringIO()
    call_command("locks", "stats", "--json", stdout=out)
    (found,) = json.loads(out.getvalue())
    assert (found["lost"], found["forced"]) == (0, 2)


def test_statistics_expire_a_week_after_the_last_use_of_a_name_used_again(
    redis_client: redis.Redis,
) -> None:
    """A name used once keeps its statistics for a day and an hour (a daily job comes back in
    time, the many names built from a user or a URL go soon); a name used again, for a week
    after its last use (issue 21)."""
    with lock("weekly"):
        pass
    ttl = redis_client.pttl(keys("weekly").stats)
    assert FIRST_STATS_TTL_MS - 60_000 < ttl <= FIRST_STATS_TTL_MS
    with lock("weekly"):
        pass
    assert STATS_TTL_MS - 60_000 < redis_client.pttl(keys("weekly").stats) <= STATS_TTL_MS
    busy = lock("busy-only")
    assert busy.acquire()
    assert not lock("busy-only").acquire(blocking=False)  # counted before any release
    assert 0 < redis_client.pttl(keys("busy-only").stats) <= FIRST_STATS_TTL_MS
    busy.release()
    assert redis_client.hlen(keys("weekly").stats) <= 2 * BUCKETS + 5


def test_recording_can_be_turned_off(redis_client: redis.Redis) -> None:
    with override_settings(REDIS_LOCK={"STATS": False}):
        with lock("unrecorded"):
            assert not lock("unrecorded").acquire(blocking=False)
        assert not redis_client.exists(keys("unrecorded").stats)
        assert get_lock_manager().get_stats("unrecorded") is None


def test_a_broken_statistics_key_never_fails_a_lock(redis_client: redis.Redis) -> None:
    redis_client.set(keys("broken").stats, "not a hash")
    with lock("broken"):
        assert not lock("broken").acquire(blocking=False)
    redis_client.delete(keys("broken").stats)
    redis_client.hset(keys("garbage").stats, mapping={"n": "many", "h3": "-1", "m": "x", "b": "2"})
    with lock("garbage"):
        pass
    stats = get_lock_manager().get_stats("garbage")
    assert stats is not None
    assert stats.busy == 2  # what is readable is shown; the rest reads as nothing
    assert get_lock_manager().stats("garbage") == [stats]


def test_the_manager_lists_statistics_by_pattern(redis_client: redis.Redis) -> None:
    for name in ("report:1", "report:2", "other"):
        with lock(name):
            pass
    names = [stats.name for stats in get_lock_manager().stats("report:*")]
    assert names == ["report:1", "report:2"]
    assert [stats.name for stats in get_lock_manager().stats()] == ["other", *names]


def test_the_command_prints_statistics_as_a_table_and_as_json(redis_client: redis.Redis) -> None:
    for _ in range(MIN_SAMPLES):
        held_for(redis_client, "cmd:slow", 2_500_000, timeout=60).release()
    held_for(redis_client, "cmd:fast", 1_000, timeout=3600).release()
    out = StringIO()
    call_command("locks", "stats", "--json", "--sort", "hold_p99", stdout=out)
    rows = json.loads(out.getvalue())
    assert [row["name"] for row in rows] == ["cmd:slow", "cmd:fast"]
    slow = rows[0]
    assert slow["acquisitions"] == MIN_SAMPLES
    assert slow["hold_p99"] == slow["hold_max"]  # the longest, within its bucket
    assert slow["hold_max"] == pytest.approx(2.5, abs=0.1)
    assert 6.0 <= slow["suggested_timeout"] <= 6.2
    assert slow["timeout"] == 60
    assert slow["holds"] == {"2 s-3 s": MIN_SAMPLES}
    assert rows[1]["suggested_timeout"] is None  # one hold: not enough history
    out = StringIO()
    call_command("locks", "stats", "--pattern", "cmd:*", stdout=out)
    text = out.getvalue()
    assert "SUGGESTED" in text
    assert "cmd:slow" in text
    assert "2.5" in text
    with pytest.raises(CommandError):
        call_command("locks", "stats", "--sort", "nonsense", stdout=StringIO())
    with pytest.raises(CommandError, match="pattern"):
        call_command("locks", "stats", "--pattern", "", stdout=StringIO())


def test_too_long_and_too_short_timeouts_are_flagged() -> None:
    holds = [0] * BUCKETS
    holds[bucket_of(150)] = 50
    long = LockStats("long", 50, 0, 0, tuple(holds), tuple([0] * BUCKETS), 0.15, 3600.0)
    assert long.suggested_timeout == 1.3
    assert any("too long" in warning for warning in long.warnings)
    holds = [0] * BUCKETS
    holds[bucket_of(9000)] = 50
    short = LockStats("short", 50, 0, 0, tuple(holds), tuple([0] * BUCKETS), 9.5, 10.0)
    assert any("too short" in warning for warning in short.warnings)


# -- timeout="auto" and Retry-After -------------------------------------------------------------


def history(client: redis.Redis, name: str, micros: int, count: int = MIN_SAMPLES) -> None:
    for _ in range(count):
        held_for(client, name, micros).release()


def test_auto_timeout_takes_the_suggestion_once_history_exists(
    redis_client: redis.Redis,
) -> None:
    history(redis_client, "auto:known", 2_500_000)  # p99 (the longest) 2.5 s: 2 x 2.5 + 1
    held = lock("auto:known", timeout="auto")
    assert held.acquire()
    assert 6.0 <= held.timeout <= 6.2
    assert 5500 < redis_client.pttl(keys("auto:known").lock) <= 6200
    # the watchdog still renews it, at a third of that timeout: its lease goes up again
    lowest = [redis_client.pttl(keys("auto:known").lock)]

    def renewed() -> bool:
        left = redis_client.pttl(keys("auto:known").lock)
        lowest[0] = min(lowest[0], left)
        return left > lowest[0] + 1000

    wait_until(renewed, timeout=5)
    held.release()
    fresh = lock("auto:fresh", timeout="auto")
    assert fresh.acquire()
    assert fresh.timeout == 30  # REDIS_LOCK TIMEOUT until enough holds are recorded
    fresh.release()


def test_auto_timeout_as_the_setting(redis_client: redis.Redis) -> None:
    history(redis_client, "auto:setting", 400_000)
    with override_settings(REDIS_LOCK={"TIMEOUT": "auto"}):
        held = lock("auto:setting")
        assert held.timeout == 30  # before its statistics are read
        with held:
            assert 1.8 <= held.timeout <= 1.9  # 2 x 0.4 s (and the release's time) + 1 s
        with lock("auto:other") as other:
            assert other.timeout == 30


def test_auto_timeout_is_refused_misspelt() -> None:
    from django.core.checks import run_checks

    from django_redis_lock import locked

    with pytest.raises(TypeError, match='number of seconds or "auto"'):
        lock("x", timeout="automatic")
    with pytest.raises(TypeError, match='number of seconds or "auto"'):
        locked("x", timeout="soon")
    locked("x", timeout="auto")  # accepted: no TypeError
    with override_settings(REDIS_LOCK={"TIMEOUT": "soon"}):
        assert [
            m.id
            for m in run_checks(tags=["caches"])
            if m.id and m.id.startswith("django_redis_lock")
        ] == ["django_redis_lock.E005"]
    with override_settings(REDIS_LOCK={"TIMEOUT": "auto"}):
        assert not [
            m for m in run_checks(tags=["caches"]) if m.id and m.id.startswith("django_redis_lock")
        ]


@pytest.mark.urls("tests.urls")
@pytest.mark.parametrize("path", ["/pay/7/", "/apay/7/"])
def test_a_busy_view_says_when_a_typical_hold_ends(
    redis_client: redis.Redis, client: object, path: str
) -> None:
    """Holds of invoice:7 last about 9 s; the current one started 4 s ago, with a 30 s lease
    kept full by auto-renewal: Retry-After is 5, not 30."""
    from django.test import Client

    assert isinstance(client, Client)
    held = held_for(redis_client, "invoice:7", 4_000_000, timeout=30)
    busy = client.get(path)
    assert busy.status_code == 423
    assert busy["Retry-After"] in ("29", "30")  # no history: the lease left
    held.release()
    history(redis_client, "invoice:7", 9_000_000)
    with override_settings(REDIS_LOCK={"STATS": True}):  # a new runtime: read them afresh
        held = held_for(redis_client, "invoice:7", 4_000_000, timeout=30)
        busy = client.get(path)
        assert busy.status_code == 423
        assert busy["Retry-After"] in ("5", "6")  # about 9 s - 4 s, rounded up
        held.release()


# -- hostile statistics (issue 21) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["\u0663", "\uff15", "5" * 5000, "-3", "1e3", "inf", b"\xff"], ids=repr
)
def test_counters_that_are_not_what_the_scripts_write_read_as_zero(
    redis_client: redis.Redis, value: str | bytes
) -> None:
    """Arabic-Indic and fullwidth digits are numbers to Python, not to Redis's HINCRBY: read
    as 0, as is anything else the scripts never write."""
    record_stats(redis_client, "odd", [10] * 3, busy=2)
    redis_client.hset(keys("odd").stats, "n", value)
    found = get_lock_manager().get_stats("odd")
    assert found is not None  # the busy count still says something
    assert (found.acquisitions, found.busy) == (0, 2)
    assert found.suggested_timeout is None


@pytest.mark.parametrize("longest", ["inf", "-inf", "nan", "-5", "1e300"])
def test_a_longest_hold_that_is_not_a_number_of_ours_is_forgotten(
    redis_client: redis.Redis, longest: str
) -> None:
    with lock("longest"):
        pass
    redis_client.hset(keys("longest").stats, "m", longest)
    held = held_for(redis_client, "longest", 300_000)
    held.release()
    written = int(redis_client.hget(keys("longest").stats, "m") or 0)
    assert 300 <= written < 1000  # the hold, not -9223372036854775808


@pytest.mark.urls("tests.urls")
def test_retry_after_is_never_longer_than_the_longest_lease(
    redis_client: redis.Redis, client: object
) -> None:
    """A lock key given an expiry of 10^13 ms by hand, or statistics crafted to say holds last
    10^14 ms: Retry-After stays at most MAX_TIMEOUT (issue 21)."""
    from django.test import Client

    assert isinstance(client, Client)
    held = lock("invoice:7", auto_renew=False)
    assert held.acquire()
    redis_client.pexpire(keys("invoice:7").lock, 10**13)
    assert int(client.get("/pay/7/")["Retry-After"]) == MAX_TIMEOUT
    held.release()
    record_stats(redis_client, "invoice:8", [10**14] * 30, timeout=10**11)
    redis_client.hset(keys("invoice:8").stats, "m", str(10**14))
    held = lock("invoice:8", auto_renew=False)
    assert held.acquire()
    redis_client.pexpire(keys("invoice:8").lock, 10**13)
    assert int(client.get("/pay/8/")["Retry-After"]) == MAX_TIMEOUT
    held.release()
