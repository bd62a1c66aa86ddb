"""The Prometheus exporter: metrics on a ``prometheus_client`` registry (importing this module
fails without ``prometheus_client``: then there is no Prometheus observer).

Works with multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, as under gunicorn): the gauge of
holds is summed over the live processes.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from django_redis_lock.metrics.base import ACQUIRED, TIMEOUT, Observer

#: Seconds, from a millisecond to an hour: a hand-over takes a millisecond, a batch job an hour.
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip


class PrometheusObserver(Observer):
    """The metrics of one registry (created once per registry: a registry refuses a name
    twice)."""

    _made: dict[int, PrometheusObserver] = {}

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.acquires = Counter(
            "django_redis_lock_acquire", "Acquire calls, by outcome: acquired, busy (it could "
            "not wait), timeout (its wait ran out), unavailable (Redis failed).",
            ["lock", "outcome"], registry=registry,
        )  # fmt: skip
        self.waits = Histogram(
            "django_redis_lock_wait_seconds", "How long acquire calls took, acquired or timed "
            "out.", ["lock"], buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self.holds = Histogram(
            "django_redis_lock_hold_seconds", "How long released holds lasted.", ["lock"],
            buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self.losses = Counter(
            "django_redis_lock_lost", "Holds found lost, by cause: renewal_failed (the "
            "renewals failed until the lease ended) or expired (the lease ran out, or an "
            "operator released it).", ["lock", "cause"], registry=registry,
        )  # fmt: skip
        self.held = Gauge(
            "django_redis_lock_held", "Holds this process has now.", ["lock"],
            multiprocess_mode="livesum", registry=registry,
        )  # fmt: skip
        self.renewals = Counter(
            "django_redis_lock_renewals", "Lease renewals by the watchdog, by outcome: renewed "
            "or failed (retried until the lease ends).", ["outcome"], registry=registry,
        )  # fmt: skip
        self.unavailables = Counter(
            "django_redis_lock_unavailable", "Calls that could not reach Redis, or that it "
            "answered with an error, by cache alias.", ["alias"], registry=registry,
        )  # fmt: skip
        self.leader = Gauge(
            "django_redis_lock_leader", "1 where this process leads, by leadership name.",
            ["lock"], multiprocess_mode="livesum", registry=registry,
        )  # fmt: skip
        self.leader_changes = Counter(
            "django_redis_lock_leader_changes", "Leaderships this process took, by "
            "leadership name.", ["lock"], registry=registry,
        )  # fmt: skip
        self.uniques = Counter(
            "django_redis_lock_unique", "Enqueues and starts of @unique tasks, by task name "
            "and outcome: enqueued, duplicate (the task holding the key returned or raised), "
            "replaced (a debounce took a queued task's key), skipped (a start that did not "
            "run), throttled (a duplicate within a window).", ["task", "outcome"],
            registry=registry,
        )  # fmt: skip
        self.rate_admitted = Counter(
            "django_redis_lock_rate_admitted", "Calls a rate limit admitted (at once or at "
            "their turn), by rate limit name template.", ["lock"], registry=registry,
        )  # fmt: skip
        self.rate_limited = Counter(
            "django_redis_lock_rate_limited", "Calls a rate limit refused (over the rate, "
            "and they could not wait their turn), by rate limit name template.", ["lock"],
            registry=registry,
        )  # fmt: skip
        self.cache_once_calls = Counter(
            "django_redis_lock_cache_once", "Calls of cache_once, by key (its template for "
            "@cached_once) and outcome: hit (in the cache), computed (this call computed it), "
            "avoided (a miss served the value another call computed: a stampede avoided).",
            ["lock", "outcome"], registry=registry,
        )  # fmt: skip

        # Each label's series, bound once: labels() costs more than the update itself.
        self._series: dict[str, _Series] = {}

    def series(self, label: str) -> _Series:
        """The series of the lock label ``label``."""
        found = self._series.get(label)
        if found is None:
            found = self._series[label] = _Series(self, label)
        return found

    @classmethod
    def for_registry(cls, path: str | None) -> PrometheusObserver:
        """The observer of the registry at the dotted ``path`` (None: the default one)."""
        registry = REGISTRY if path is None else import_string(path)
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(
                f"REDIS_LOCK['METRICS_REGISTRY'] {path!r} is a {type(registry).__name__}, not a "
                "prometheus_client CollectorRegistry."
            )
        made = cls._made.get(id(registry))
        if made is None or made.registry is not registry:
            made = cls._made[id(registry)] = cls(registry)
        return made

    def end_acquire(
        self, label: str, lock: Any, started: Any, outcome: str | None, waited: float,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        if outcome is None:
            return
        series = self.series(label)
        series.outcome(outcome).inc()
        if outcome in (ACQUIRED, TIMEOUT):
            series.waits.observe(waited)

    def began(self, label: str, lock: Any) -> None:
        self.series(label).held.inc()

    def ended(self, label: str, lock: Any, held: float) -> None:
        series = self.series(label)
        series.held.dec()
        series.holds.observe(held)

    def lost(self, label: str, lock: Any, cause: str, held: float) -> None:
        self.series(label).held.dec()
        self.losses.labels(label, cause).inc()

    def renewal(self, outcome: str) -> None:
        self.renewals.labels(outcome).inc()

    def cache_once(self, label: str, outcome: str) -> None:
        self.cache_once_calls.labels(label, outcome).inc()

    def unavailable(self, alias: str) -> None:
        self.unavailables.labels(alias).inc()

    def unique(self, task: str, outcome: str) -> None:
        self.uniques.labels(task, outcome).inc()

    def rate(self, label: str, admitted: bool) -> None:
        (self.rate_admitted if admitted else self.rate_limited).labels(label).inc()

    def leading(self, label: str, leads: bool) -> None:
        self.leader.labels(label).set(1 if leads else 0)
        if leads:
            self.leader_changes.labels(label).inc()


class _Series:
    """The metrics of one lock label, bound."""

    def __init__(self, metrics: PrometheusObserver, label: str) -> None:
        self._metrics, self._label = metrics, label
        self._outcomes: dict[str, Any] = {}
        self.waits = metrics.waits.labels(label)
        self.holds = metrics.holds.labels(label)
        self.held = metrics.held.labels(label)

    def outcome(self, outcome: str) -> Any:
        """The acquire counter of ``outcome``."""
        found = self._outcomes.get(outcome)
        if found is None:
            found = self._outcomes[outcome] = self._metrics.acquires.labels(self._label, outcome)
        return found
