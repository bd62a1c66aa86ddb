"""cache_once, acache_once and @cached_once: one computation per miss however many callers
miss at once, the others woken to read its value; a failed computation taken over by a
waiter; nothing left held on any path; the stampedes avoided counted in the statistics."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test.utils import override_settings

from django_redis_lock import acache_once, cache_once, cached_once
from tests.backends.test_valkey import valkey_caches
from tests.cached.scenarios import Gated, held_fills, queued, settled, stampede, stats_of
from tests.helpers import counted_caches, round_trips, server_backend, start, wait_until

ALIASES = ["default", "builtin", "valkey"]


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest, redis_url: str) -> Iterator[str]:
    """Each client library in turn: django-redis, Django's RedisCache, django-valkey."""
    with override_settings(
        CACHES={**settings.CACHES, "valkey": valkey_caches(redis_url)["default"]}
    ):
        yield request.param


def test_a_miss_computes_and_stores_with_the_timeout_then_a_hit_reads(alias: str) -> None:
    computed = Gated({"rows": [1, 2]})
    computed.go.set()
    assert cache_once("report", computed, 60, using=alias) == {"rows": [1, 2]}
    assert cache_once("report", computed, 60, using=alias) == {"rows": [1, 2]}
    assert computed.calls == 1
    assert caches[alias].get("report") == {"rows": [1, 2]}
    stored = caches[alias].make_key("report")
    assert 55_000 < server_backend(alias).client.pttl(stored) <= 60_000
    assert held_fills(alias) == []  # the writer released before it returned


def test_none_is_a_value_and_the_default_timeout_is_the_caches() -> None:
    calls: list[int] = []
    assert cache_once("nothing", lambda: calls.append(1)) is None
    assert cache_once("nothing", lambda: calls.append(1)) is None
    assert calls == [1]
    assert server_backend().client.pttl(caches["default"].make_key("nothing")) > 0  # 300 s


def test_concurrent_misses_compute_once_and_the_waiters_are_counted(alias: str) -> None:
    assert stampede("busy", 5, "fresh", alias) == ["fresh"] * 6
    assert held_fills(alias) == []
    assert stats_of("busy", alias).avoided == 5


def test_a_failed_computation_raises_to_its_caller_and_a_waiter_takes_over() -> None:
    failing = Gated(error=RuntimeError("boom"))
    first = start(lambda: cache_once("flaky", failing, 30))
    assert failing.started.wait(10)
    succeeding = Gated("second try")
    succeeding.go.set()
    others = [start(lambda: cache_once("flaky", succeeding, 30)) for _ in range(4)]
    wait_until(lambda: queued("flaky") == 4)
    failing.go.set()
    with pytest.raises(RuntimeError, match="boom"):
        first.result(10)
    assert [future.result(10) for future in others] == ["second try"] * 4
    assert (failing.calls, succeeding.calls) == (1, 1)
    settled()
    assert queued("flaky") == 0
    assert stats_of("flaky").avoided == 3


def test_a_hit_costs_one_round_trip_and_bad_input_none(redis_url: str) -> None:
    with counted_caches(redis_url):
        caches["default"].set("warm", 1)
        with round_trips() as hit:
            assert cache_once("warm", lambda: 2) == 1
        assert hit == [1]
        with round_trips() as refused:
            for key, compute, error in [
                (b"bytes", lambda: 1, TypeError),
                ("", lambda: 1, ValueError),
                ("k", "not callable", TypeError),
                ("x" * 5000, lambda: 1, ValueError),
            ]:
                with pytest.raises(error):
                    cache_once(key, compute)  # type: ignore[arg-type]
            for timeout, error in [(0, ValueError), (-1, ValueError), (float("inf"), ValueError),
                                   (True, TypeError), ("10", TypeError)]:  # fmt: skip
                with pytest.raises(error, match="timeout"):
                    cache_once("k", lambda: 1, timeout)  # type: ignore[arg-type]
        assert refused == [0]


def test_an_async_compute_is_refused_by_the_sync_call() -> None:
    async def compute() -> int:
        return 1

    with pytest.raises(TypeError, match="acache_once"):
        cache_once("k", compute)  # type: ignore[unused-coroutine]


def test_the_sync_call_in_a_running_event_loop_is_refused_hit_or_miss() -> None:
    """Refused always, not only when it would wait (under a stampede, in production)."""
    caches["default"].set("in-loop", 1)

    async def call(key: str) -> Any:
        return cache_once(key, lambda: 2)

    for key in ("in-loop", "in-loop-miss"):
        with pytest.raises(RuntimeError, match="acache_once"):
            asyncio.run(call(key))
    assert caches["default"].get("in-loop-miss") is None


def test_a_quorum_is_refused_clearly() -> None:
    with pytest.raises(ImproperlyConfigured, match="quorum"):
        cache_once("k", lambda: 1, using=["a", "b", "c"])  # type: ignore[arg-type]


def test_async_waiters_are_woken_and_a_cancelled_one_leaves_nothing_held() -> None:
    async def scenario() -> None:
        go, started = asyncio.Event(), asyncio.Event()
        calls: list[int] = []

        async def compute() -> str:
            calls.append(1)
            started.set()
            await asyncio.wait_for(go.wait(), 30)
            return "async value"

        first = asyncio.create_task(acache_once("async", compute, 30))
        await asyncio.wait_for(started.wait(), 10)
        waiters = [asyncio.create_task(acache_once("async", compute, 30)) for _ in range(3)]
        await _until(lambda: queued("async") == 3)
        waiters[0].cancel()
        await _until(lambda: queued("async") == 2)
        go.set()
        assert await asyncio.wait_for(first, 10) == "async value"
        assert await asyncio.wait_for(asyncio.gather(*waiters[1:]), 10) == ["async value"] * 2
        with pytest.raises(asyncio.CancelledError):
            await waiters[0]
        assert calls == [1]

    asyncio.run(scenario())
    settled()
    assert stats_of("async").avoided == 2


def test_a_cancelled_async_writer_releases_and_a_waiter_computes() -> None:
    async def scenario() -> list[str]:
        started = asyncio.Event()

        async def never() -> str:
            started.set()
            await asyncio.sleep(60)  # cancelled long before
            return "never"

        writer = asyncio.create_task(acache_once("cancelled", never, 30))
        await asyncio.wait_for(started.wait(), 10)
        waiter = asyncio.create_task(acache_once("cancelled", lambda: "sync compute", 30))
        await _until(lambda: queued("cancelled") == 1)
        writer.cancel()
        return [await asyncio.wait_for(waiter, 10)]

    assert asyncio.run(scenario()) == ["sync compute"]
    settled()


async def _until(predicate: Any, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(predicate):
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def test_the_decorator_keys_by_the_arguments_sync_and_async() -> None:
    calls: list[tuple[int, str]] = []

    @cached_once("report:{year}:{kind}", timeout=60)
    def report(year: int, kind: str = "full") -> str:
        calls.append((year, kind))
        return f"{year}-{kind}"

    @cached_once("areport:{year}")
    async def areport(year: int) -> str:
        calls.append((year, "async"))
        return f"async {year}"

    assert [report(2025), report(2025), report(2025, kind="short")] == [
        "2025-full",
        "2025-full",
        "2025-short",
    ]
    assert caches["default"].get("report:2025:full") == "2025-full"
    assert asyncio.run(areport(1999)) == asyncio.run(areport(1999)) == "async 1999"
    assert calls == [(2025, "full"), (2025, "short"), (1999, "async")]
    assert report.__name__ == "report"


def test_the_decorator_refuses_a_wrong_template_or_option_at_decoration() -> None:
    with pytest.raises(ValueError, match="'month'"):

        @cached_once("report:{month}")
        def report(year: int) -> int:
            return year

    with pytest.raises(ValueError, match="timeout"):
        cached_once("k", timeout=0)
    with pytest.raises(TypeError, match="using"):
        cached_once("k", using=3)  # type: ignore[arg-type]
    with pytest.raises(ImproperlyConfigured, match="quorum"):
        cached_once("k", using=["a", "b", "c"])  # type: ignore[arg-type]


def test_stampedes_avoided_show_in_locks_stats_and_survive_garbage(
    redis_client: redis.Redis,
) -> None:
    assert stampede("shown", 1) == ["v", "v"]
    assert stats_of("shown").avoided == 1
    stats_key = server_backend().shared_keys_for("cache_once:shown", "r").stats
    redis_client.hset(stats_key, "ca", "lots")
    assert stats_of("shown").avoided == 0  # garbage reads as 0, never a crash
    caches["default"].delete("shown")
    assert stampede("shown", 1) == ["v", "v"]  # counting into garbage fails no release
    redis_client.hset(stats_key, "ca", "1")
    caches["default"].delete("shown")
    assert stampede("shown", 2) == ["v"] * 3
    assert stats_of("shown").avoided == 3
