"""Hostile probes, area 3: semaphore()/rwlock() options, limits, names, timeouts."""

from __future__ import annotations

import math

import pytest

from django_redis_lock import MAX_NAME_LENGTH, MAX_TIMEOUT, lock, locked, rwlock, semaphore


@pytest.mark.parametrize("limit", [0, -1, 1001, 10**30])
def test_semaphore_bad_limit_value(limit: object) -> None:
    with pytest.raises(ValueError):
        semaphore("h3", limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [None, True, False, 2.0, 2.5, "3", math.inf, math.nan, [3]])
def test_semaphore_bad_limit_type(limit: object) -> None:
    with pytest.raises(TypeError):
        semaphore("h3", limit)  # type: ignore[arg-type]


def test_semaphore_limit_bounds_ok() -> None:
    assert semaphore("h3", 1).limit == 1
    assert semaphore("h3", 1000).limit == 1000


def test_semaphore_limit_keyword_ok() -> None:
    assert semaphore("h3", limit=2).limit == 2


def test_semaphore_refuses_reentrant() -> None:
    with pytest.raises(TypeError):
        semaphore("h3", 2, reentrant=True)  # type: ignore[call-arg]


def test_semaphore_refuses_reentrant_false_too() -> None:
    with pytest.raises(TypeError):
        semaphore("h3", 2, reentrant=False)  # type: ignore[call-arg]


def test_semaphore_refuses_unknown_option() -> None:
    with pytest.raises(TypeError):
        semaphore("h3", 2, colour="red")  # type: ignore[call-arg]


def test_semaphore_refuses_limit_twice() -> None:
    with pytest.raises(TypeError):
        semaphore("h3", 2, limit=3)  # type: ignore[misc]


@pytest.mark.parametrize("option", [{"limit": 3}, {"reentrant": True}, {"reentrant": False},
                                    {"kind": "w"}, {"foo": 1}])
def test_rwlock_refuses_options(option: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        rwlock("h3", **option)  # type: ignore[arg-type]


def test_rwlock_positional_limit_refused() -> None:
    with pytest.raises(TypeError):
        rwlock("h3", 3)  # type: ignore[misc]


@pytest.mark.parametrize("name", ["", None, 5, b"bytes", "x" * (MAX_NAME_LENGTH + 1), "\ud800"])
@pytest.mark.parametrize("make", ["semaphore", "rwlock"])
def test_bad_names_refused_at_the_call(name: object, make: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        if make == "semaphore":
            semaphore(name, 2)  # type: ignore[arg-type]
        else:
            rwlock(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, math.inf, math.nan, MAX_TIMEOUT + 1, 0.0001, True, "5",
                                     [1]])
@pytest.mark.parametrize("make", ["semaphore", "rwlock-read", "rwlock-write"])
def test_bad_timeouts_refused_at_the_call(timeout: object, make: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        if make == "semaphore":
            semaphore("h3", 2, timeout=timeout)  # type: ignore[arg-type]
        elif make == "rwlock-read":
            rwlock("h3", timeout=timeout).read()  # type: ignore[arg-type]
        else:
            rwlock("h3", timeout=timeout).write()  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_bad_blocking_timeout_refused(value: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        semaphore("h3", 2, blocking_timeout=value)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        rwlock("h3", blocking_timeout=value)  # type: ignore[arg-type]


def test_blocking_false_with_blocking_timeout_refused() -> None:
    with pytest.raises(ValueError):
        semaphore("h3", 2, blocking=False, blocking_timeout=5)
    with pytest.raises(ValueError):
        rwlock("h3", blocking=False, blocking_timeout=5)


@pytest.mark.parametrize("label", [5, b"x", "x" * 257])
def test_bad_label_refused(label: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        semaphore("h3", 2, label=label)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        rwlock("h3", label=label)  # type: ignore[arg-type]


@pytest.mark.parametrize("using", ["nope", 5, ""])
def test_bad_using_refused(using: object) -> None:
    with pytest.raises((ValueError, TypeError, Exception)) as info:
        semaphore("h3", 2, using=using)  # type: ignore[arg-type]
    assert isinstance(info.value, (ValueError, TypeError)) or "Improperly" in type(info.value).__name__


def test_hostile_names_accepted_by_semaphore_and_rwlock() -> None:
    for name in ["{tag}", "a*b?c[d]", "\u00e9\u4e2d\U0001f512", "x" * MAX_NAME_LENGTH, " ", "\n"]:
        permit = semaphore(name, 2, auto_renew=False)
        assert permit.acquire(blocking=False)
        reader = rwlock(name, auto_renew=False).read()
        assert reader.acquire(blocking=False)
        assert permit.name == name
        permit.release()
        reader.release()


def test_locked_limit_bad_values() -> None:
    for bad in (0, -1, 1001):
        with pytest.raises(ValueError):
            locked("h3", limit=bad)
    for bad in (True, 2.5, "3"):
        with pytest.raises(TypeError):
            locked("h3", limit=bad)  # type: ignore[arg-type]


def test_locked_limit_none_is_a_lock() -> None:
    @locked("h3", limit=None)
    def f() -> str:
        return "ok"

    assert f() == "ok"


def test_lock_reentrant_still_accepted() -> None:
    held = lock("h3", reentrant=True, auto_renew=False)
    assert held.acquire()
    assert held.acquire()
    held.release()
    held.release()
