"""Metrics and traces of this process's locks: Prometheus and OpenTelemetry, each when its
library is installed and ``REDIS_LOCK["METRICS"]`` is True (any other value turns them off).

The lock core and the watchdog report what happens to an observer of each exporter: an acquire
call's outcome and wait, a hold's start and end, a loss and its cause, a renewal, Redis out of
reach. With no observer (nothing installed, or turned off) each report is one test of an empty
tuple. A lock's ``lock`` label is its name template (``invoice:{invoice_id}``), never the name
itself, so that the number of label sets stays bounded: ``METRICS_OTHER`` labels the rest,
and the templates past the first ``METRICS_MAX_LABELS`` of the process (a template formatted
before it reached ``template=`` is one per name).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.metrics.base import (
    ACQUIRED,
    BUSY,
    EXPIRED,
    RENEWAL_FAILED,
    TIMEOUT,
    UNAVAILABLE,
    HoldRecord,
    Observer,
)

logger = logging.getLogger("django_redis_lock")

__all__ = [
    "ACQUIRED",
    "BUSY",
    "EXPIRED",
    "RENEWAL_FAILED",
    "TIMEOUT",
    "UNAVAILABLE",
    "Acquisition",
    "HoldRecord",
    "Observer",
    "began",
    "cache_once",
    "ended",
    "label_for",
    "leading",
    "observers",
    "rate",
    "renewal",
    "reset",
    "unavailable",
]

_observers: tuple[Observer, ...] | None = None
# The templates given out as labels in this process, at most METRICS_MAX_LABELS of them, and
# whether one was refused already (the warning is logged once).
_labels: set[str] = set()
_capped = False
_labelling = threading.Lock()


def observers() -> tuple[Observer, ...]:
    """The observers of this process's locks (built on first use, again after a change of
    REDIS_LOCK); empty when metrics are off or no exporter is installed."""
    found = _observers
    return found if found is not None else _build()


def reset() -> None:
    """Build the observers again on next use, and count the labels anew (REDIS_LOCK
    changed)."""
    global _observers, _capped
    _observers = None
    with _labelling:
        _labels.clear()
        _capped = False


_building = threading.Lock()


def _build() -> tuple[Observer, ...]:
    global _observers
    with _building:  # two threads' first locks at once: one builds, the other uses it
        if _observers is not None:
            return _observers
        built: list[Observer] = []
        if lock_settings.metrics:
            built += _made("prometheus", _prometheus)
            built += _made("OpenTelemetry", _opentelemetry)
        _observers = tuple(built)
        return _observers


def _made(what: str, make: Callable[[], Observer | None]) -> list[Observer]:
    """The observer ``make`` makes (none when its library is not installed); one that cannot
    be made (a bad METRICS_REGISTRY: system check E015) is logged, and locks go on without."""
    try:
        made = make()
    except ImportError:
        return []
    except Exception:
        logger.exception("Lock metrics for %s could not be set up; locks go on without.", what)
        return []
    return [made] if made is not None else []


def _prometheus() -> Observer:
    from django_redis_lock.metrics.prometheus import PrometheusObserver

    try:
        return PrometheusObserver.for_registry(lock_settings.METRICS_REGISTRY)
    except ImportError as exc:  # the registry's module, not prometheus_client: not "absent"
        raise ValueError(f"REDIS_LOCK['METRICS_REGISTRY']: {exc}") from exc


def _opentelemetry() -> Observer | None:
    from django_redis_lock.metrics.otel import OpenTelemetryObserver, configured

    # The API alone does nothing: then it costs nothing either.
    return OpenTelemetryObserver() if configured() else None


def label_for(template: str | None) -> str:
    """The ``lock`` label of a lock of ``template``: the template, unless METRICS_MAX_LABELS
    others were given out; then, as for no template, METRICS_OTHER. A lock asks once and keeps
    the answer, so that its acquires and holds keep one label."""
    global _capped
    if template is not None and template in _labels:  # the common case: no lock taken
        return template
    other = str(lock_settings.METRICS_OTHER)
    if template is None:
        return other
    with _labelling:
        cap = lock_settings.max_labels
        if len(_labels) < cap:
            _labels.add(template)
            return template
        if template in _labels:  # given out while this thread waited for _labelling
            return template
        if not _capped:
            _capped = True
            logger.warning(
                "Lock metrics have %d lock labels, REDIS_LOCK['METRICS_MAX_LABELS']: %r and "
                "the templates after it are labelled %r. A template formatted before it "
                "reaches template= makes a label per name: pass the unformatted one.",
                cap,
                template,
                other,
            )
    return other


class Acquisition:
    """One acquire call of ``lock`` (labelled ``label``) on ``backend``, observed by
    ``observed``: begun by the constructor, ended by :meth:`done`."""

    __slots__ = ("label", "lock", "observed", "started", "starts")

    def __init__(self, lock: Any, label: str, backend: Any, observed: tuple[Observer, ...]) -> None:
        self.lock, self.observed, self.label = lock, observed, label
        self.started = time.monotonic()
        # Only an observer that traces has something to start (a span).
        traced = any(observer.traces for observer in observed)
        self.starts = (
            [_started(each, label, lock, backend) for each in observed] if traced else None
        )

    def done(self, acquired: bool, waiting: bool, error: BaseException | None = None) -> None:
        """The call returned ``acquired`` (``waiting``: it could wait) or raised ``error``."""
        if error is None:
            outcome: str | None = ACQUIRED if acquired else TIMEOUT if waiting else BUSY
        else:
            outcome = UNAVAILABLE if isinstance(error, LockUnavailable) else None
        waited = time.monotonic() - self.started
        starts, label, lock = self.starts, self.label, self.lock
        for index, observer in enumerate(self.observed):
            try:
                started = starts[index] if starts is not None else None
                observer.end_acquire(label, lock, started, outcome, waited, error)
            except Exception:
                _failed()


def _started(observer: Observer, label: str, lock: Any, backend: Any) -> Any:
    if not observer.traces:
        return None
    try:
        return observer.start_acquire(label, lock, backend)
    except Exception:
        _failed()
        return None


def began(lock: Any, label: str, observed: tuple[Observer, ...]) -> HoldRecord:
    """A hold of ``lock`` (labelled ``label``) began, seen by ``observed`` (the lock asks
    only when :func:`observers` are some); the lock keeps the record for :func:`ended`."""
    record = HoldRecord(label, time.monotonic(), observed)
    for observer in observed:
        try:
            observer.began(label, lock)
        except Exception:
            _failed()
    return record


def ended(lock: Any, record: HoldRecord, cause: str | None = None) -> None:
    """The hold of ``lock`` that began as ``record`` ended: by its release (``cause`` None),
    or found lost for ``cause``."""
    held, label = time.monotonic() - record.began_at, record.label
    for observer in record.observed:
        try:
            if cause is None:
                observer.ended(label, lock, held)
            else:
                observer.lost(label, lock, cause, held)
        except Exception:
            _failed()


def leading(name: str, leads: bool) -> None:
    """This process took (``leads``) or gave up the leadership ``name`` (its ``lock`` label,
    within METRICS_MAX_LABELS as a template's)."""
    _labelled("leading", name, leads)


def unique(task: str, outcome: str) -> None:
    """An enqueue or a start of the @unique task ``task``: its ``outcome`` (enqueued,
    duplicate, replaced, skipped, throttled)."""
    for observer in observers():
        _safely(observer.unique, task, outcome)


def rate(label: str, admitted: bool) -> None:
    """A call of the rate limit labelled ``label`` (its name template's label, see
    :func:`label_for`) was admitted, or limited."""
    for observer in observers():
        _safely(observer.rate, label, admitted)


def cache_once(template: str | None, outcome: str) -> None:
    """A call of ``cache_once`` with a key of ``template`` (None: METRICS_OTHER's) ended with
    ``outcome``: "hit", "computed" or "avoided". The ``lock`` label: see :func:`label_for`."""
    _labelled("cache_once", template, outcome)


def renewal(outcome: str) -> None:
    """A renewal by the watchdog: "renewed" or "failed"."""
    for observer in observers():
        _safely(observer.renewal, outcome)


def unavailable(alias: str) -> None:
    """A call to the Redis of cache ``alias`` failed."""
    for observer in observers():
        _safely(observer.unavailable, alias)


def _labelled(report: str, name: str | None, *args: Any) -> None:
    """Each observer's ``report`` of the lock ``name`` (its label, see :func:`label_for`)."""
    observed = observers()
    if not observed:
        return
    label = label_for(name)
    for observer in observed:
        _safely(getattr(observer, report), label, *args)


def _failed() -> None:
    """An exporter failed (inside an ``except``): logged, never raised into a lock's operation."""
    logger.exception("Reporting a lock metric failed.")


def _safely(report: Any, *args: Any) -> None:
    """An exporter's failure is logged, never raised into a lock's operation."""
    try:
        report(*args)
    except Exception:
        logger.exception("Reporting a lock metric failed.")
