"""The registry the Prometheus tests point REDIS_LOCK["METRICS_REGISTRY"] at: a fresh one
per test (tests/metrics/conftest.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

current = CollectorRegistry()
