"""The metrics page's examples: the labels they give, the renewal-failure receiver, and the
dashboard's and alerts' expressions, which name only metrics the package exports."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from django_redis_lock import lock
from django_redis_lock.signals import lock_renewal_failed, send
from tests.docs.examples import example

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_the_examples_label_by_template(registry: Any) -> None:
    metrics = example("metrics")
    try:
        metrics.pay(1234)
        metrics.refund(invoice_id=1234)
        labels = {"lock": "invoice:{invoice_id}", "outcome": "acquired"}
        assert registry.get_sample_value("django_redis_lock_acquire_total", labels) == 2
    finally:
        lock_renewal_failed.disconnect(metrics.renewal_failed)


def test_the_renewal_failure_receiver_logs(caplog: pytest.LogCaptureFixture) -> None:
    metrics = example("metrics")
    lock_renewal_failed.connect(metrics.renewal_failed)
    try:
        with caplog.at_level(logging.ERROR, logger="myapp.locks"):
            send(lock_renewal_failed, lock("watched"), 7, error=TimeoutError("x"), lease_left=2.5)
    finally:
        lock_renewal_failed.disconnect(metrics.renewal_failed)
    assert "lock watched: renewal failed (x), 2.5 s of lease left" in caplog.text


def _named_metrics(text: str) -> set[str]:
    return set(re.findall(r"django_redis_lock_\w+", text))


def test_dashboard_and_alerts_name_exported_metrics(registry: Any) -> None:
    dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    named = _named_metrics("\n".join(expressions)) | _named_metrics(
        (EXAMPLES / "lock-alerts.yml").read_text()
    )
    with lock("exported", timeout=0.2):
        pass
    families = list(registry.collect())
    exported = {sample.name for family in families for sample in family.samples}
    exported |= {family.name + suffix for family in families for suffix in ("", "_total")}
    assert named
    assert named <= exported, named - exported
