"""OpenTelemetry: the SDK with its in-memory exporters read after real lock operations. A span
per acquire, current while it runs (so a Redis client's spans are its children), an event on a
loss, and the durations through the metrics API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from django_redis_lock import cache_once, lock, rate_limit
from tests.cached.scenarios import stampede
from tests.helpers import builtin_cache_with, wait_until
from tests.metrics.conftest import Telemetry, lock_settings

trace = pytest.importorskip("opentelemetry.trace")


class SpanningConnection(redis.Connection):
    """A redis-py connection that starts a span per command, as a client instrumentation
    (opentelemetry-instrumentation-redis) does."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        with trace.get_tracer("tests").start_as_current_span("redis.command"):
            super().send_packed_command(command, check_health)


def _spans(telemetry: Telemetry, name: str) -> list[Any]:
    return [span for span in telemetry.spans.get_finished_spans() if span.name == name]


def test_an_acquire_is_a_span_and_the_parent_of_redis_spans(
    telemetry: Telemetry, redis_url: str
) -> None:
    with builtin_cache_with(redis_url, connection_class=SpanningConnection) as alias:
        held = lock("traced:1", template="traced", using=alias)
        assert held.acquire()
        token = held.fencing_token
        held.release()
    [acquire] = _spans(telemetry, "lock.acquire")
    attributes = dict(acquire.attributes)
    assert attributes["lock.name.template"] == "traced"
    assert attributes["lock.outcome"] == "acquired"
    assert attributes["lock.fencing_token"] == token
    assert attributes["lock.alias"] == alias
    assert attributes["lock.waited"] >= 0
    children = [
        span
        for span in _spans(telemetry, "redis.command")
        if span.parent is not None and span.parent.span_id == acquire.context.span_id
    ]
    assert children  # the acquire's own script, sent while its span was current


def test_an_instrumented_client_spans_the_locks_scripts_under_the_acquire(
    telemetry: Telemetry, redis_url: str
) -> None:
    """OpenTelemetry's redis-py instrumentation wraps the client's execute_command: the lock's
    scripts then go through it (not on connections beside the pool), and it spans them."""
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.redis")
    instrumentor = instrumentation.RedisInstrumentor()
    instrumentor.instrument()
    try:
        with builtin_cache_with(redis_url) as alias:  # a backend made while instrumented
            held = lock("traced:3", template="traced", using=alias)
            assert held.acquire()
            held.release()
    finally:
        instrumentor.uninstrument()
    [acquire] = _spans(telemetry, "lock.acquire")
    scripts = [
        span for span in telemetry.spans.get_finished_spans() if span.name in ("EVALSHA", "EVAL")
    ]
    assert len(scripts) >= 2  # the acquire's and the release's
    assert any(
        span.parent is not None and span.parent.span_id == acquire.context.span_id
        for span in scripts
    )


def test_a_busy_async_acquire_is_a_span_too(telemetry: Telemetry) -> None:
    async def main() -> None:
        async with lock("traced:2", template="traced"):
            assert not await lock("traced:2", template="traced").aacquire(blocking=False)

    asyncio.run(main())
    outcomes = sorted(
        dict(span.attributes)["lock.outcome"] for span in _spans(telemetry, "lock.acquire")
    )
    assert outcomes == ["acquired", "busy"]


def test_durations_through_the_metrics_api(telemetry: Telemetry) -> None:
    with lock("measured:1", template="measured"):
        pass
    acquired = [
        point
        for point in telemetry.points("lock.acquire.duration")
        if dict(point.attributes) == {"lock.name.template": "measured", "lock.outcome": "acquired"}
    ]
    holds = [
        point
        for point in telemetry.points("lock.hold.duration")
        if dict(point.attributes) == {"lock.name.template": "measured"}
    ]
    assert [point.count for point in acquired] == [1]
    assert [point.count for point in holds] == [1]


def test_templates_past_max_labels_are_attributed_to_other(telemetry: Telemetry) -> None:
    with lock_settings(METRICS_MAX_LABELS=1):
        for number in range(3):
            with lock(f"capped:{number}", template=f"capped:{number}"):
                pass
    templates = [
        dict(span.attributes)["lock.name.template"] for span in _spans(telemetry, "lock.acquire")
    ]
    assert templates == ["capped:0", "other", "other"]
    held = {
        dict(point.attributes)["lock.name.template"]
        for point in telemetry.points("lock.hold.duration")
    }
    assert {"capped:1", "capped:2"}.isdisjoint(held)


def test_a_loss_is_an_event_on_the_span_of_the_code_that_finds_it(telemetry: Telemetry) -> None:
    held = lock("lost:1", template="lost", timeout=0.05, auto_renew=False)
    assert held.acquire()
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("work"):
        wait_until(lambda: not held.owned())
    [work] = _spans(telemetry, "work")
    [event] = [event for event in work.events if event.name == "lock.lost"]
    assert dict(event.attributes)["lock.lost.cause"] == "expired"
    assert dict(event.attributes)["lock.name.template"] == "lost"
    lost = [point.value for point in telemetry.points("lock.lost")]
    assert sum(lost) >= 1


def test_rate_limit_calls_are_counted_by_outcome(telemetry: Telemetry) -> None:
    limit = rate_limit("otel-rate", "1/h")
    assert [limit.acquire(blocking=False) for _ in range(3)] == [True, False, False]
    counted = {
        dict(point.attributes)["lock.rate.outcome"]: point.value
        for point in telemetry.points("lock.rate.calls")
        if dict(point.attributes)["lock.name.template"] == "otel-rate"
    }
    assert counted == {"admitted": 1, "limited": 2}


def test_cache_once_calls_are_counted_by_outcome(telemetry: Telemetry) -> None:
    assert stampede("otel-fill", 1, template="otel-fill") == ["v"] * 2
    assert cache_once("otel-fill", lambda: "unused", template="otel-fill") == "v"
    counted = {
        dict(point.attributes)["lock.cache_once.outcome"]: point.value
        for point in telemetry.points("lock.cache_once.calls")
        if dict(point.attributes)["lock.name.template"] == "otel-fill"
    }
    assert counted == {"hit": 1, "computed": 1, "avoided": 1}
