"""Prometheus metrics read from prometheus_client's registry after real lock operations: the
label sets and counts exact. Multiprocess mode in processes of their own."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from django_redis_lock import (
    LockUnavailable,
    RateLimited,
    cache_once,
    get_lock_manager,
    lock,
    locked,
    rate_limit,
    semaphore,
)
from django_redis_lock.checks import check_settings
from django_redis_lock.signals import lock_renewal_failed
from django_redis_lock.testing import expire_now
from tests.cached.scenarios import stampede
from tests.helpers import builtin_cache_with, received, wait_until
from tests.metrics.conftest import lock_settings

prometheus_client = pytest.importorskip("prometheus_client")


def value(registry: Any, name: str, **labels: str) -> float:
    """A sample's value (0 when it was never recorded)."""
    return registry.get_sample_value(name, labels) or 0.0


def acquires(registry: Any, label: str, outcome: str) -> float:
    """How many acquire calls of the lock label ``label`` ended with ``outcome``."""
    return value(registry, "django_redis_lock_acquire_total", lock=label, outcome=outcome)


def test_an_acquire_and_release_are_counted_under_the_template(registry: Any) -> None:
    held = lock("invoice:7", template="invoice:{invoice_id}")
    assert held.acquire()
    assert value(registry, "django_redis_lock_held", lock="invoice:{invoice_id}") == 1
    held.release()
    labels = {"lock": "invoice:{invoice_id}"}
    assert value(registry, "django_redis_lock_acquire_total", outcome="acquired", **labels) == 1
    assert value(registry, "django_redis_lock_held", **labels) == 0
    assert value(registry, "django_redis_lock_hold_seconds_count", **labels) == 1
    assert value(registry, "django_redis_lock_wait_seconds_count", **labels) == 1
    # The expanded name is never a label.
    assert acquires(registry, "invoice:7", "acquired") == 0


def test_names_without_a_template_share_a_label_the_settings_name(registry: Any) -> None:
    with lock("report:1"), lock("report:2"):
        pass
    assert acquires(registry, "other", "acquired") == 2
    changed = lock_settings(METRICS_REGISTRY="tests.metrics.registries.current", METRICS_OTHER="x")
    with changed, lock("report:3"):
        pass
    assert acquires(registry, "x", "acquired") == 1


def test_locked_labels_its_template_and_semaphores_count_too(registry: Any) -> None:
    @locked("invoice:{pk}")
    def pay(pk: int) -> int:
        return pk

    assert pay(1) == 1
    assert pay(2) == 2
    with semaphore("builds", 2, template="builds"):
        pass
    assert acquires(registry, "invoice:{pk}", "acquired") == 2
    assert value(registry, "django_redis_lock_hold_seconds_count", lock="builds") == 1


def test_busy_and_timeout_outcomes(registry: Any) -> None:
    with lock("busy:1", template="busy"):
        assert not lock("busy:1", template="busy").acquire(blocking=False)
        assert not lock("busy:1", template="busy", blocking_timeout=0.05).acquire()
    labels = {"lock": "busy"}
    assert value(registry, "django_redis_lock_acquire_total", outcome="busy", **labels) == 1
    assert value(registry, "django_redis_lock_acquire_total", outcome="timeout", **labels) == 1
    assert value(registry, "django_redis_lock_acquire_total", outcome="acquired", **labels) == 1
    # The timed-out wait is observed (it waited), the refusal without waiting is not.
    assert value(registry, "django_redis_lock_wait_seconds_count", **labels) == 2
    assert value(registry, "django_redis_lock_wait_seconds_sum", **labels) >= 0.05


def test_async_acquires_are_counted(registry: Any) -> None:
    async def main() -> None:
        async with lock("async:1", template="async"):
            assert not await lock("async:1", template="async").aacquire(blocking=False)

    asyncio.run(main())
    labels = {"lock": "async"}
    assert value(registry, "django_redis_lock_acquire_total", outcome="acquired", **labels) == 1
    assert value(registry, "django_redis_lock_acquire_total", outcome="busy", **labels) == 1
    assert value(registry, "django_redis_lock_held", **labels) == 0


def test_a_lost_hold_is_counted_with_its_cause(registry: Any) -> None:
    held = lock("lost:1", template="lost", timeout=0.05, auto_renew=False)
    assert held.acquire()
    wait_until(lambda: not held.owned())
    assert value(registry, "django_redis_lock_lost_total", lock="lost", cause="expired") == 1
    assert value(registry, "django_redis_lock_held", lock="lost") == 0
    with pytest.raises(Exception, match="lost"):
        held.release()
    assert value(registry, "django_redis_lock_held", lock="lost") == 0  # not twice


def test_unavailable_redis_is_counted_by_alias(registry: Any) -> None:
    from testproject.redis_server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    with (
        builtin_cache_with(url, socket_connect_timeout=0.2) as alias,
        pytest.raises(LockUnavailable),
    ):
        lock("away:1", template="away", using=alias).acquire(blocking=False)
    assert acquires(registry, "away", "unavailable") == 1
    assert value(registry, "django_redis_lock_unavailable_total", alias=alias) == 1


def test_renewals_are_counted(registry: Any) -> None:
    with lock("renewed", timeout=0.15):
        wait_until(lambda: value(registry, "django_redis_lock_renewals_total", outcome="renewed"))


def test_a_failed_renewal_signals_before_the_lease_ends(registry: Any, redis_factory: Any) -> None:
    server = redis_factory()
    with (
        builtin_cache_with(server.url, socket_timeout=0.1) as alias,
        received(lock_renewal_failed) as failures,
    ):
        held = lock("paused", template="paused", timeout=0.6, using=alias)
        assert held.acquire()
        server.pause()  # SIGSTOP: renewals time out
        try:
            wait_until(lambda: failures, timeout=5)
            first = failures[0]
            assert first["name"] == "paused"
            assert first["fencing_token"] == held.fencing_token
            assert 0 < first["lease_left"] <= 0.6
            assert isinstance(first["error"], Exception)
            wait_until(lambda: held.lost, timeout=5)
        finally:
            server.resume()
    assert value(registry, "django_redis_lock_renewals_total", outcome="failed") >= 1
    assert (
        value(registry, "django_redis_lock_lost_total", lock="paused", cause="renewal_failed") == 1
    )


def test_a_hold_marked_lost_is_already_counted(registry: Any) -> None:
    """Whoever sees ``lost`` (a test, a health check) sees the loss in the metrics too: the
    loss is counted before the hold is marked lost, not after."""
    held = lock("counted:lost", template="counted", timeout=0.3)
    seen: list[tuple[bool, float]] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "was lost" in record.getMessage():
                seen.append(
                    (
                        held.lost,
                        value(
                            registry,
                            "django_redis_lock_lost_total",
                            lock="counted",
                            cause="expired",
                        ),
                    )
                )

    handler = Seen()
    logging.getLogger("django_redis_lock").addHandler(handler)
    try:
        assert held.acquire()
        expire_now("counted:lost")  # the watchdog finds it gone, before this returns
        assert held.lost
        assert value(registry, "django_redis_lock_lost_total", lock="counted", cause="expired") == 1
    finally:
        logging.getLogger("django_redis_lock").removeHandler(handler)
    assert len(seen) == 1
    marked, counted = seen[0]
    assert not marked or counted == 1


def test_metrics_off_records_nothing(registry: Any) -> None:
    with lock_settings(METRICS=False), lock("off"):
        pass
    assert acquires(registry, "other", "acquired") == 0


@pytest.mark.parametrize("setting", [0, 1, "false", "no", "yes", None])
def test_metrics_that_are_not_a_bool_are_off_as_the_check_reports(
    registry: Any, setting: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that never ran the checks exports nothing the checks refuse: one rule."""
    changed = lock_settings(METRICS_REGISTRY="tests.metrics.registries.current", METRICS=setting)
    with changed:
        assert [message.id for message in check_settings()] == ["django_redis_lock.E006"]
        with lock("off"), lock("off:again"):
            pass
    assert acquires(registry, "other", "acquired") == 0
    [logged] = [record for record in caplog.records if "METRICS" in record.getMessage()]
    assert logged.levelname == "ERROR"
    assert "Lock metrics are off" in logged.getMessage()


def test_templates_past_max_labels_are_labelled_other_with_one_warning(
    registry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    changed = lock_settings(
        METRICS_REGISTRY="tests.metrics.registries.current", METRICS_MAX_LABELS=2
    )
    with changed:
        for number in range(5):  # a formatted name passed as its template: one per name
            with lock(f"job:{number}", template=f"job:{number}"):
                pass
        with lock("job:0", template="job:0"):  # a label given out before stays its own
            pass
    assert acquires(registry, "job:0", "acquired") == 2
    assert acquires(registry, "job:1", "acquired") == 1
    assert acquires(registry, "job:2", "acquired") == 0
    assert acquires(registry, "other", "acquired") == 3
    warnings = [record for record in caplog.records if "METRICS_MAX_LABELS" in record.message]
    assert len(warnings) == 1
    assert warnings[0].levelname == "WARNING"
    assert "'job:2'" in warnings[0].message


@pytest.mark.parametrize("setting", [0, -5, "1000", 2.5, True, None])
def test_max_labels_that_cannot_be_used_are_reported_and_the_default_applies(
    registry: Any, setting: object, caplog: pytest.LogCaptureFixture
) -> None:
    changed = lock_settings(
        METRICS_REGISTRY="tests.metrics.registries.current", METRICS_MAX_LABELS=setting
    )
    with changed:
        assert [message.id for message in check_settings()] == ["django_redis_lock.E015"]
        for number in range(3):
            with lock(f"many:{number}", template=f"many:{number}"):
                pass
    assert [acquires(registry, f"many:{number}", "acquired") for number in range(3)] == [1] * 3
    assert "Lock metrics use 1000" in caplog.text


CHILD = textwrap.dedent(
    """
    import sys
    import django

    django.setup()
    from django_redis_lock import lock

    for number in range(3):
        with lock(f"mp:{number}", template="mp:{n}"):
            pass
    held = lock("mp:held:" + sys.argv[1], template="mp:held")
    held.acquire()
    print("held", flush=True)
    sys.stdin.readline()  # until the test has read the gauge
    held.release()
    """
)


def test_multiprocess_mode_sums_the_processes(tmp_path: Path, redis_url: str) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "REDIS_URL": redis_url,
    }
    root = Path(__file__).resolve().parents[2]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(index)],
            env=env,
            cwd=root,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for index in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            ready, _, _ = select.select([child.stdout], [], [], 60)  # a bounded wait
            assert ready, "a child did not take its lock in 60 s"
            assert child.stdout.readline().strip() == "held"
        collected = CollectorRegistry()
        MultiProcessCollector(collected, path=str(directory))
        assert acquires(collected, "mp:{n}", "acquired") == 6
        assert value(collected, "django_redis_lock_held", lock="mp:held") == 2
    finally:
        for child in children:
            child.communicate("go\n", timeout=30)
    assert [child.returncode for child in children] == [0, 0]


def _served(client: Any, label: str) -> float:
    """The demo's /metrics, over a request: acquires of ``label`` it counts."""
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if sample.name == "django_redis_lock_acquire_total"
        and sample.labels == {"lock": label, "outcome": "acquired"}
    )


def test_the_default_registry_is_served_at_metrics(client: Any) -> None:
    before = _served(client, "served")
    with lock("served:1", template="served"):
        pass
    assert _served(client, "served") == before + 1


def test_a_failed_release_counts_the_hold_as_ended(registry: Any, redis_factory: Any) -> None:
    server = redis_factory()
    with builtin_cache_with(server.url, socket_timeout=0.1) as alias:
        held = lock("blip", template="blip", using=alias, auto_renew=False)
        assert held.acquire()
        assert value(registry, "django_redis_lock_held", lock="blip") == 1
        server.pause()
        try:
            with pytest.raises(LockUnavailable):
                held.release()
        finally:
            server.resume()
    # This process holds it no more (the watchdog gives it back once Redis answers).
    assert value(registry, "django_redis_lock_held", lock="blip") == 0


def test_a_failing_exporter_never_fails_a_lock(
    registry: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django_redis_lock.metrics.prometheus import PrometheusObserver

    def broken(*args: Any) -> None:
        raise RuntimeError("exporter down")

    monkeypatch.setattr(PrometheusObserver, "end_acquire", broken)
    monkeypatch.setattr(PrometheusObserver, "began", broken)
    with lock("sturdy"):
        pass
    assert "Reporting a lock metric failed" in caplog.text


def test_a_registry_that_cannot_be_had_leaves_locks_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with lock_settings(METRICS_REGISTRY="no.such.registry"), lock("without-metrics"):
        pass
    assert "could not be set up" in caplog.text


def test_leadership_is_a_gauge_of_this_process_and_a_count_of_changes(registry: Any) -> None:
    from django_redis_lock import get_lock_manager, leader

    def leads() -> float:
        return value(registry, "django_redis_lock_leader", lock="leader:beat")

    def changes() -> float:
        return value(registry, "django_redis_lock_leader_changes_total", lock="leader:beat")

    with leader("beat"):
        assert (leads(), changes()) == (1, 1)
    assert (leads(), changes()) == (0, 1)
    lead = leader("beat", timeout=0.6)
    assert lead.acquire()
    assert (leads(), changes()) == (1, 2)
    assert get_lock_manager().release("leader:beat")  # deposed
    assert lead.lost.wait(5)
    assert leads() == 0


def test_unique_enqueues_and_starts_are_counted_by_task_and_outcome(registry: Any) -> None:
    import dataclasses
    import functools

    from django_redis_lock import Skipped
    from django_redis_lock.unique.enqueue import enqueue_once
    from django_redis_lock.unique.keys import UniqueSpec, started

    def unique_total(outcome: str) -> float:
        return value(registry, "django_redis_lock_unique_total", task="app.job", outcome=outcome)

    spec = UniqueSpec("k", "executed", "return", 60, None, None, task="app.job")
    replace = dataclasses.replace(spec, on_duplicate="replace")
    window = dataclasses.replace(spec, until="window", window=60)
    for each, task_id in ((spec, "t1"), (spec, "t2"), (replace, "t3"), (window, "w1")):
        name = "unique:w" if each is window else "unique:k"
        enqueue_once(each, name, "app.job", task_id, functools.partial(str, task_id), str, str)
    enqueue_once(window, "unique:w", "app.job", "w2", lambda: "w2", str, str)
    with pytest.raises(Skipped):  # t1, replaced by t3, starts
        started(replace, "unique:k", "app.job", "t1")
    counted = ("enqueued", "duplicate", "replaced", "skipped", "throttled")
    assert [unique_total(outcome) for outcome in counted] == [2, 1, 1, 1, 1]


def test_rate_limit_calls_are_counted_admitted_and_limited_by_template(registry: Any) -> None:
    limit = rate_limit("prom-rate", "1/h", burst=1)
    assert [limit.acquire(blocking=False) for _ in range(4)] == [True, True, False, False]
    with pytest.raises(RateLimited):
        limit.check()
    admitted = value(registry, "django_redis_lock_rate_admitted_total", lock="prom-rate")
    limited = value(registry, "django_redis_lock_rate_limited_total", lock="prom-rate")
    assert (admitted, limited) == (2, 3)
    assert get_lock_manager().reset_rate("prom-rate") is not None  # a reset counts no call
    assert limit.acquire(blocking=False)
    assert value(registry, "django_redis_lock_rate_admitted_total", lock="prom-rate") == 3
    assert value(registry, "django_redis_lock_rate_limited_total", lock="prom-rate") == 3


def test_cache_once_calls_are_counted_by_key_and_outcome(registry: Any) -> None:
    assert stampede("prom-fill:1", 2, template="prom-fill:{pk}") == ["v"] * 3
    assert cache_once("prom-fill:1", lambda: "unused", template="prom-fill:{pk}") == "v"
    assert cache_once("prom-fill:1", lambda: "unused") == "v"  # no template: "other"

    def counted(label: str) -> dict[str, float]:
        return {
            outcome: value(registry, "django_redis_lock_cache_once_total", lock=label,
                           outcome=outcome)
            for outcome in ("hit", "computed", "avoided")
        }  # fmt: skip

    assert counted("prom-fill:{pk}") == {"hit": 1, "computed": 1, "avoided": 2}
    assert counted("other") == {"hit": 1, "computed": 0, "avoided": 0}
    # The lock's own metrics are labelled by the template too.
    assert acquires(registry, "cache_once:prom-fill:{pk}", "acquired") == 3
