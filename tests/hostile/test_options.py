"""Hostile probes of the options semaphore(), rwlock() and @locked(limit=...) take: limits,
names, timeouts, blocking, labels and cache aliases out of range or of the wrong type, options
a lock has and they do not, and names full of Redis pattern and key-tag characters.

The promise held: docs/semaphores.rst (their signatures; ``limit`` a whole number from 1 to
1000) and the project's rule for bad input, a clear ValueError or TypeError (or Django's
ImproperlyConfigured for an alias not in CACHES) at the call, never later in Redis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock import MAX_NAME_LENGTH, MAX_TIMEOUT, lock, locked, rwlock, semaphore

BAD_LIMIT = "limit must be from 1 to 1000"
BLOCKING_FALSE_WITH_TIMEOUT = "blocking=False with blocking_timeout"

WITH_NAME: dict[str, Callable[[Any], object]] = {
    "semaphore": lambda name: semaphore(name, 2),
    "rwlock": lambda name: rwlock(name),
}
WITH_TIMEOUT: dict[str, Callable[[Any], object]] = {
    "semaphore": lambda timeout: semaphore("opt", 2, timeout=timeout),
    "rwlock-read": lambda timeout: rwlock("opt", timeout=timeout).read(),
    "rwlock-write": lambda timeout: rwlock("opt", timeout=timeout).write(),
}


@pytest.mark.parametrize("limit", [0, -1, 1001, 10**30])
def test_semaphore_limit_out_of_range_is_a_value_error(limit: object) -> None:
    with pytest.raises(ValueError, match=BAD_LIMIT):
        semaphore("opt", limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [None, True, False, 2.0, 2.5, "3", math.inf, math.nan, [3]])
def test_semaphore_limit_not_an_int_is_a_type_error(limit: object) -> None:
    with pytest.raises(TypeError):
        semaphore("opt", limit)  # type: ignore[arg-type]


def test_semaphore_limit_1_and_1000_are_accepted() -> None:
    assert semaphore("opt", 1).limit == 1
    assert semaphore("opt", 1000).limit == 1000


def test_semaphore_limit_by_keyword_is_accepted() -> None:
    assert semaphore("opt", limit=2).limit == 2


def test_semaphore_refuses_reentrant() -> None:
    with pytest.raises(TypeError):
        semaphore("opt", 2, reentrant=True)  # type: ignore[call-arg]


def test_semaphore_refuses_reentrant_false_too() -> None:
    with pytest.raises(TypeError):
        semaphore("opt", 2, reentrant=False)  # type: ignore[call-arg]


def test_semaphore_refuses_unknown_option() -> None:
    with pytest.raises(TypeError):
        semaphore("opt", 2, colour="red")  # type: ignore[call-arg]


def test_semaphore_refuses_limit_twice() -> None:
    with pytest.raises(TypeError):
        semaphore("opt", 2, limit=3)  # type: ignore[misc]


@pytest.mark.parametrize(
    "option", [{"limit": 3}, {"reentrant": True}, {"reentrant": False}, {"kind": "w"}, {"foo": 1}]
)
def test_rwlock_refuses_options(option: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        rwlock("opt", **option)  # type: ignore[arg-type]


def test_rwlock_positional_limit_refused() -> None:
    with pytest.raises(TypeError):
        rwlock("opt", 3)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", ["", None, 5, b"bytes", "x" * (MAX_NAME_LENGTH + 1), "\ud800"])
@pytest.mark.parametrize("make", list(WITH_NAME))
def test_bad_names_refused_at_the_call(name: object, make: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        WITH_NAME[make](name)


@pytest.mark.parametrize(
    "timeout", [0, -1, math.inf, math.nan, MAX_TIMEOUT + 1, 0.0001, True, "5", [1]]
)
@pytest.mark.parametrize("make", list(WITH_TIMEOUT))
def test_bad_timeouts_refused_at_the_call(timeout: object, make: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        WITH_TIMEOUT[make](timeout)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_bad_blocking_timeout_refused(value: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        semaphore("opt", 2, blocking_timeout=value)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        rwlock("opt", blocking_timeout=value)  # type: ignore[arg-type]


def test_blocking_false_with_blocking_timeout_refused() -> None:
    with pytest.raises(ValueError, match=BLOCKING_FALSE_WITH_TIMEOUT):
        semaphore("opt", 2, blocking=False, blocking_timeout=5)
    with pytest.raises(ValueError, match=BLOCKING_FALSE_WITH_TIMEOUT):
        rwlock("opt", blocking=False, blocking_timeout=5)


@pytest.mark.parametrize("label", [5, b"x", "x" * 257])
def test_bad_label_refused(label: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        semaphore("opt", 2, label=label)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        rwlock("opt", label=label)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("using", "refusal", "message"),
    [
        ("nope", ImproperlyConfigured, "'nope' .* is not in CACHES"),
        ("", ImproperlyConfigured, "'' .* is not in CACHES"),
        (5, TypeError, "using must be a cache alias"),
    ],
)
def test_bad_using_refused(using: object, refusal: type[Exception], message: str) -> None:
    with pytest.raises(refusal, match=message):
        semaphore("opt", 2, using=using)  # type: ignore[arg-type]


def test_names_with_pattern_and_key_tag_characters_are_accepted_by_semaphore_and_rwlock() -> None:
    for name in ["{tag}", "a*b?c[d]", "\u00e9\u4e2d\U0001f512", "x" * MAX_NAME_LENGTH, " ", "\n"]:
        permit = semaphore(name, 2, auto_renew=False)
        assert permit.acquire(blocking=False)
        reader = rwlock(name, auto_renew=False).read()
        assert reader.acquire(blocking=False)
        assert permit.name == name
        permit.release()
        reader.release()


def test_locked_limit_out_of_range_or_not_an_int_is_refused() -> None:
    for bad in (0, -1, 1001):
        with pytest.raises(ValueError, match=BAD_LIMIT):
            locked("opt", limit=bad)
    for not_an_int in (True, 2.5, "3"):
        with pytest.raises(TypeError):
            locked("opt", limit=not_an_int)  # type: ignore[arg-type]


def test_locked_limit_none_is_a_lock() -> None:
    @locked("opt", limit=None)
    def f() -> str:
        return "ok"

    assert f() == "ok"


def test_lock_reentrant_still_accepted() -> None:
    held = lock("opt", reentrant=True, auto_renew=False)
    assert held.acquire()
    assert held.acquire()
    held.release()
    held.release()
