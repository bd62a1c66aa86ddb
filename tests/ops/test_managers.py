"""The two managers are siblings over LockManager: each runs every public method it has, on
its own topology (issue 37: the quorum's inherited methods reached a backend it never set)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test.utils import override_settings

from django_redis_lock import Lock, LockManager, get_lock_manager
from django_redis_lock.ops.quorum_manager import QuorumLockManager
from django_redis_lock.ops.server_manager import ServerLockManager
from testproject.redis_server import RedisServerGroup, find_redis_server

ALIASES = ["q0", "q1", "q2"]


@pytest.fixture(scope="module")
def quorum_caches() -> Iterator[dict[str, Any]]:
    """One cache alias per primary of a quorum of three this module starts."""
    group = RedisServerGroup(binary=find_redis_server())
    try:
        yield {
            alias: {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": group().url,
                "OPTIONS": {"socket_timeout": 2},
            }
            for alias in ALIASES
        }
    finally:
        group.stop_all()


# What each public name of a manager is called with; a name missing here fails the test, so a
# method added later is run too.
CALLS: dict[str, Callable[[Any], object]] = {
    "alias": lambda manager: manager.alias,
    "using": lambda manager: manager.using,
    "lock": lambda manager: manager.lock("other", timeout=5),
    "list": lambda manager: list(manager.list("held*")),
    "page": lambda manager: manager.page("held*"),
    "check_cursor": lambda manager: manager.check_cursor(""),
    "get": lambda manager: manager.get("held"),
    "holders": lambda manager: manager.holders("held"),
    "stats": lambda manager: manager.stats("held*"),
    "iter_stats": lambda manager: list(manager.iter_stats("held*")),
    "get_stats": lambda manager: manager.get_stats("held"),
    "force_release": lambda manager: manager.force_release("gone"),
    "release_all": lambda manager: manager.release_all("gone"),
    "release": lambda manager: manager.release("gone"),
    "clear": lambda manager: manager.clear("none*"),
    "get_rate": lambda manager: manager.get_rate("held"),
    "reset_rate": lambda manager: manager.reset_rate("gone"),
}


def public_names(manager: LockManager) -> set[str]:
    return {name for name, _ in inspect.getmembers(type(manager)) if not name.startswith("_")}


def test_every_public_method_of_the_quorum_manager_runs_on_a_quorum(
    quorum_caches: dict[str, Any],
) -> None:
    with override_settings(
        CACHES={**quorum_caches, "default": quorum_caches["q0"]},
        REDIS_LOCK={"CACHE": ALIASES, "AUTO_RENEW": False},
    ):
        manager = get_lock_manager()
        assert isinstance(manager, QuorumLockManager)
        assert isinstance(manager, LockManager)  # the documented name covers both kinds
        assert ServerLockManager not in type(manager).__mro__
        held = manager.lock("held", timeout=10)
        assert isinstance(held, Lock)
        assert held.acquire(blocking=False)
        try:
            assert public_names(manager) - CALLS.keys() == set()
            for name in sorted(public_names(manager)):
                CALLS[name](manager)  # an AttributeError here is a method it cannot run
            assert [info.name for info in manager.list("held*")] == ["held"]
            assert manager.using == tuple(ALIASES)
        finally:
            held.release()


def test_the_server_manager_has_the_public_methods_of_the_quorum_manager_and_name_of() -> None:
    """What the two have in common is LockManager's; a server's keys are its own to read."""
    server = public_names(ServerLockManager.__new__(ServerLockManager))
    quorum = public_names(QuorumLockManager.__new__(QuorumLockManager))
    assert server - quorum == {"name_of"}
    assert quorum - server == set()
    assert isinstance(get_lock_manager(), ServerLockManager)
