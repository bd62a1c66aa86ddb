"""Hostile probes of rate limits as operators see them: junk someone else wrote into a rate
limit's state hash (each field: not a number, negative, beyond any time, a rate or burst the
scripts refuse, text that moves the cursor), keys of the wrong type or with another name's
tag, and junk counters in the statistics hash.

The promise held: docs/operating.rst ("Rate limits": a state this library did not write is
skipped with a warning, and ``locks release NAME`` still resets it) and the project's rule
that anything read back from Redis may be garbage: it is shown safely or skipped, never a
crash.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis
from redis.typing import EncodableT

from django_redis_lock import get_lock_manager, rate_limit
from django_redis_lock.runtime import runtime
from tests.helpers import staff_client
from tests.hostile.test_operating import cmd

CHANGELIST = "/admin/django_redis_lock/lock/"


def state_key(name: str) -> str:
    return runtime().backend().rate_keys_for(name)[0]


def active(name: str) -> str:
    """The state key of the rate limit ``name``, after a call that wrote it."""
    assert rate_limit(name, "1/h", burst=2).acquire(blocking=False)
    return state_key(name)


JUNK: list[dict[EncodableT, EncodableT]] = [
    {"t": "abc"},
    {"t": "-5"},
    {"t": "nan"},
    {"t": "1e300"},
    {"t": "9" * 40},
    {"t": ""},
    {"i": "0"},
    {"i": "abc"},
    {"i": "-100"},
    {"i": "9" * 20},
    {"b": "-1"},
    {"b": "x"},
    {"b": "99999999999999999999"},
    {"r": "fast"},
    {"r": "0/s"},
    {"r": "\x1b[31m10/s"},
    {"r": b"\xff\xfe"},
]


@pytest.mark.parametrize("junk", JUNK, ids=[repr(each)[:40] for each in JUNK])
@pytest.mark.django_db
def test_a_state_someone_else_wrote_is_skipped_with_a_warning_and_still_reset(
    redis_client: redis.Redis, junk: dict[EncodableT, EncodableT], caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.hset(active("junk"), mapping=junk)
    manager = get_lock_manager()
    with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
        assert list(manager.list()) == []
        assert manager.page().locks == []
        assert manager.holders("junk") == []
    assert "Skipped 1 held lock" in caplog.text
    assert json.loads(cmd("list", "--json")) == []
    assert "No held locks." in cmd("list")
    listed = staff_client("view_lock").get(CHANGELIST)
    assert listed.status_code == 200
    released = manager.force_release("junk")  # a reset deletes it, readable or not
    assert released is not None
    assert released.info is None
    assert not redis_client.exists(state_key("junk"))
    assert rate_limit("junk", "1/h").acquire(blocking=False)


def test_a_time_at_the_edge_of_the_scripts_range_is_shown_with_its_queue(
    redis_client: redis.Redis,
) -> None:
    redis_client.hset(active("edge"), "t", "8999999999999000.500")
    [info] = get_lock_manager().list()
    assert info.rate is not None
    assert (info.rate.fill, info.rate.capacity) == (3.0, 3)
    assert info.rate.queued > 2_000_000  # hours of turns: shown, not refused
    assert "3 of 3 used" in cmd("show", "edge")
    assert json.loads(cmd("show", "edge", "--json"))["queued"] == info.rate.queued


def test_keys_of_the_wrong_type_or_another_names_tag_are_not_listed(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.set(state_key("string"), "not a hash")
    redis_client.rpush(state_key("list"), "t")
    foreign = active("real").replace(":g:real", ":g:impostor")
    redis_client.copy(state_key("real"), foreign)
    with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
        assert [info.name for info in get_lock_manager().list()] == ["real"]
    assert "Skipped 1 held lock" in caplog.text  # the impostor: no rate_limit() reaches it
    assert get_lock_manager().get_rate("string") is None
    released = get_lock_manager().force_release("string")
    assert released is not None
    assert "whose data this library did not write" in cmd("release", "list")


@pytest.mark.parametrize("junk", ["abc", "-1", "1e5", "9" * 30, "\u0661", ""])
def test_junk_rate_counters_in_the_statistics_read_as_zero(
    redis_client: redis.Redis, junk: str
) -> None:
    limit = rate_limit("stats-junk", "1/h")
    assert [limit.acquire(blocking=False) for _ in range(2)] == [True, False]
    stats_key = runtime().backend().rate_keys_for("stats-junk")[1]
    redis_client.hset(stats_key, "rl", junk)
    stats = get_lock_manager().get_stats("stats-junk")
    assert stats is not None
    assert (stats.admitted, stats.limited) == (1, 0)
    redis_client.hset(stats_key, "ra", junk)
    assert get_lock_manager().get_stats("stats-junk") is None  # nothing this library wrote
    assert "No statistics recorded" in cmd("stats")
