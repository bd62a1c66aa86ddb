"""Fixtures of the metrics tests: a fresh Prometheus registry, OpenTelemetry's SDK with its
in-memory exporters (set up once per process: its providers can be set only once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test.utils import override_settings

prometheus_client = pytest.importorskip("prometheus_client")
from tests.metrics import registries  # noqa: E402


def lock_settings(**changes: Any) -> Any:
    """override_settings of REDIS_LOCK with ``changes``."""
    return override_settings(REDIS_LOCK={**getattr(settings, "REDIS_LOCK", {}), **changes})


@pytest.fixture
def registry() -> Iterator[Any]:
    """A registry of this test's own, the one the metrics go to."""
    registries.current = prometheus_client.CollectorRegistry()
    with lock_settings(METRICS_REGISTRY="tests.metrics.registries.current"):
        yield registries.current


class Telemetry:
    """OpenTelemetry's SDK, with exporters that keep what they get in memory."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        trace.set_tracer_provider(provider)
        self.reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))

    def points(self, name: str) -> list[Any]:
        """The data points of the metric ``name`` collected now."""
        data = self.reader.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


_telemetry: list[Telemetry] = []


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    """The SDK's exporters, emptied of what earlier tests left."""
    pytest.importorskip("opentelemetry.sdk")
    if not _telemetry:
        _telemetry.append(Telemetry())
    found = _telemetry[0]
    found.spans.clear()
    with lock_settings():  # the observers are built anew, on the SDK's providers
        yield found
