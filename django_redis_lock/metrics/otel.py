"""The OpenTelemetry exporter: a span per acquire call, current while the call runs (so the
client's own Redis spans, where instrumented, are its children), an event on a loss, and the
durations through the metrics API. Importing this module fails without ``opentelemetry-api``:
then there is no OpenTelemetry observer. Without an SDK configured, the API does nothing.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context, metrics, trace

from django_redis_lock.metrics.base import Observer

#: The instrumentation scope of the spans and metrics.
SCOPE = "django_redis_lock"


def configured() -> bool:
    """Whether an SDK (or another implementation) has set the global tracer or meter
    provider: the API's own providers do nothing."""
    tracing = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    unset = ("_ProxyMeterProvider", "NoOpMeterProvider")  # the API's own: the proxy is private
    return tracing or type(metrics.get_meter_provider()).__name__ not in unset


class OpenTelemetryObserver(Observer):
    """Spans from the global tracer provider, instruments from the global meter provider."""

    traces = True

    def __init__(self) -> None:
        self.tracer = trace.get_tracer(SCOPE)
        meter = metrics.get_meter(SCOPE)
        self.acquire_duration = meter.create_histogram(
            "lock.acquire.duration", unit="s", description="How long acquire calls took."
        )
        self.hold_duration = meter.create_histogram(
            "lock.hold.duration", unit="s", description="How long released holds lasted."
        )
        self.losses = meter.create_counter(
            "lock.lost", unit="{hold}", description="Holds found lost, by cause."
        )
        self.rate_calls = meter.create_counter(
            "lock.rate.calls",
            unit="{call}",
            description="Calls of rate limits, by outcome: admitted (at once or at their turn) "
            "or limited.",
        )
        self.cache_once_calls = meter.create_counter(
            "lock.cache_once.calls",
            unit="{call}",
            description="Calls of cache_once, by outcome: hit, computed, or avoided (a miss "
            "served the value another call computed).",
        )

    def cache_once(self, label: str, outcome: str) -> None:
        self.cache_once_calls.add(
            1, {"lock.name.template": label, "lock.cache_once.outcome": outcome}
        )

    def rate(self, label: str, admitted: bool) -> None:
        outcome = "admitted" if admitted else "limited"
        self.rate_calls.add(1, {"lock.name.template": label, "lock.rate.outcome": outcome})

    def start_acquire(self, label: str, lock: Any, backend: Any) -> Any:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return None  # no SDK set up (yet): no span to make, at no cost
        span = self.tracer.start_span(
            "lock.acquire",
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "lock.name.template": label,
                "lock.alias": str(getattr(backend, "alias", "")),
                "lock.topology": type(backend).__name__,
            },
        )
        return span, context.attach(trace.set_span_in_context(span))

    def end_acquire(
        self, label: str, lock: Any, started: Any, outcome: str | None, waited: float,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        if started is not None:
            span, token = started
            context.detach(token)  # first: the caller's context back, whatever fails below
            try:
                span.set_attribute("lock.outcome", outcome or "interrupted")
                span.set_attribute("lock.waited", waited)
                if lock.fencing_token is not None and outcome == "acquired":
                    span.set_attribute("lock.fencing_token", lock.fencing_token)
                if error is not None:
                    span.record_exception(error)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
            finally:
                span.end()
        if outcome is not None:
            attributes = {"lock.name.template": label, "lock.outcome": outcome}
            self.acquire_duration.record(waited, attributes)

    def ended(self, label: str, lock: Any, held: float) -> None:
        self.hold_duration.record(held, {"lock.name.template": label})

    def lost(self, label: str, lock: Any, cause: str, held: float) -> None:
        self.losses.add(1, {"lock.name.template": label, "lock.lost.cause": cause})
        attributes: dict[str, str | float] = {
            "lock.name.template": label,
            "lock.lost.cause": cause,
            "lock.held": held,
        }
        current = trace.get_current_span()
        if current.is_recording():  # found by the code that holds it: in its own span
            current.add_event("lock.lost", attributes)
            return
        with self.tracer.start_as_current_span("lock.lost") as span:  # found by the watchdog
            span.add_event("lock.lost", attributes)
