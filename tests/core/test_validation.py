"""One set of rules: lock(), @locked, the manager and the system checks agree on every input."""

from __future__ import annotations

import math

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_redis_lock import get_lock_manager, lock, locked
from django_redis_lock.validation import MAX_TIMEOUT, MIN_TIMEOUT

REFUSED = r"seconds from 0\.001 up to"


@pytest.mark.parametrize("timeout", [0, MIN_TIMEOUT / 2, -1, MAX_TIMEOUT * 2, math.inf, math.nan])
def test_a_timeout_refused_anywhere_is_refused_everywhere(timeout: float) -> None:
    with pytest.raises(ValueError, match=REFUSED) as by_lock:
        lock("rules", timeout=timeout)
    with pytest.raises(ValueError, match=REFUSED):
        locked("rules", timeout=timeout)
    with pytest.raises(ValueError, match=REFUSED):
        get_lock_manager().lock("rules", timeout=timeout)
    with override_settings(REDIS_LOCK={"TIMEOUT": timeout}):
        errors = [e for e in run_checks(tags=["caches"]) if e.id == "django_redis_lock.E005"]
    assert [e.msg for e in errors] == [
        str(by_lock.value).replace("timeout", "REDIS_LOCK['TIMEOUT']")
    ]


@pytest.mark.parametrize("timeout", [MIN_TIMEOUT, 0.5, 30, MAX_TIMEOUT])
def test_a_timeout_accepted_anywhere_is_accepted_everywhere(timeout: float) -> None:
    assert lock("rules", timeout=timeout).timeout == pytest.approx(timeout)
    locked("rules", timeout=timeout)
    with override_settings(REDIS_LOCK={"TIMEOUT": timeout}):
        assert not [
            e for e in run_checks(tags=["caches"]) if (e.id or "").startswith("django_redis_lock.E")
        ]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"label": 5}, TypeError),
        ({"label": "x" * 257}, ValueError),
        ({"using": 5}, TypeError),
        ({"auto_renew": "yes"}, TypeError),
        ({"blocking_timeout": -1}, ValueError),
    ],
)
def test_lock_and_locked_refuse_the_same_options_alike(
    options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error) as by_lock:
        lock("rules", **options)  # type: ignore[arg-type]
    with pytest.raises(error) as by_decorator:
        locked("rules", **options)  # type: ignore[arg-type]
    assert str(by_decorator.value) == str(by_lock.value)


@pytest.mark.parametrize("lease", [0.05, 4000, "5", None])
def test_a_hand_over_lease_out_of_bounds_is_refused_at_startup_and_at_use(lease: object) -> None:
    with override_settings(REDIS_LOCK={"HANDOVER_LEASE": lease}):
        assert [e.id for e in run_checks(tags=["caches"]) if e.id == "django_redis_lock.E009"]
        with pytest.raises((TypeError, ValueError), match="HANDOVER_LEASE"):
            lock("rules")
