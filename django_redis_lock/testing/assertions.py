"""What the test kit reads: who holds a name (:func:`held`, :func:`assert_held`,
:func:`assert_not_held`, :func:`assert_enqueued_once`) and which locks a block took
(:func:`captured_locks`). Everything is read from Redis through the public LockManager."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from django_redis_lock.core.shared import SharedLock
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.records import LEADER_PREFIX, UNIQUE_PREFIX, LockInfo
from django_redis_lock.signals import lock_acquired
from django_redis_lock.unique import key_of

#: What ``kind`` takes: None or "lock" (a lock), a "semaphore"'s place, a "read" or "write"
#: hold, a "leader"ship, a "unique" task's key (both named without their prefix), a "rate" limit.
KINDS = (None, "lock", "semaphore", "read", "write", "leader", "unique", "rate")
# The holds the AssertionError of assert_held() lists at most.
SHOWN = 20
_SHARED_KINDS = {"s": "semaphore", "r": "read", "w": "write"}
_PREFIXES = {"leader": LEADER_PREFIX, "unique": UNIQUE_PREFIX}

Using = str | Sequence[str] | None


class Captured(NamedTuple):
    """A lock taken inside :func:`captured_locks`: its name and kind ("lock", "semaphore",
    "read", "write", "leader", "unique"); a leadership's and a unique key's name without its
    prefix, as :func:`held` takes them."""

    name: str
    kind: str


def lock_name(name: str, kind: str | None) -> str:
    """The lock name that holds ``name`` of ``kind`` ("leader:<name>" for a leadership);
    ValueError for a kind that is not one of KINDS."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, not {kind!r}.")
    if not isinstance(name, str):
        raise TypeError(f"A lock name is a str, not {type(name).__name__}.")
    return _PREFIXES.get(kind or "", "") + name


def holds(name: str, kind: str | None = None, using: Using = None) -> list[LockInfo]:
    """Every hold of ``name`` of ``kind`` (see KINDS), read from Redis."""
    full = lock_name(name, kind)
    manager = get_lock_manager(using)
    if kind == "rate":
        info = manager.get_rate(full)
        return [] if info is None else [info]
    if kind in ("semaphore", "read", "write"):
        return [info for info in manager.holders(full) if info.kind == kind]
    info = manager.get(full)
    return [] if info is None else [info]


def held(name: str, *, kind: str | None = None, using: Using = None) -> LockInfo | None:
    """The hold of ``name`` as operators see it (owner, label, fencing token, lease left), or
    None when nobody holds it. ``kind``: None for a lock, else "semaphore", "read", "write"
    (one of the holders), "leader" (``name`` without "leader:"), "unique" (``name`` without
    "unique:"), or "rate" (the rate limit's fill). ``using``: the cache alias (None: the
    REDIS_LOCK CACHE)."""
    found = holds(name, kind, using)
    return found[0] if found else None


def assert_held(
    name: str,
    *,
    owner: str | None = None,
    label: str | None = None,
    kind: str | None = None,
    using: Using = None,
) -> LockInfo:
    """The hold of ``name`` (see :func:`held`) whose owner is ``owner`` and label ``label``
    (None: any); AssertionError, listing what is held, when there is none."""
    found = holds(name, kind, using)
    for info in found:
        if (owner is None or info.owner == owner) and (label is None or info.label == label):
            return info
    wanted = f"{lock_name(name, kind)!r}" + (f" of kind {kind!r}" if kind else "")
    wanted += f" with owner {owner!r}" if owner is not None else ""
    wanted += f" with label {label!r}" if label is not None else ""
    raise AssertionError(f"{wanted} is not held. {held_now(using)}")


def assert_not_held(name: str, *, kind: str | None = None, using: Using = None) -> None:
    """AssertionError, naming the holder, when ``name`` is held (see :func:`held`)."""
    found = holds(name, kind, using)
    if found:
        raise AssertionError(f"{lock_name(name, kind)!r} is held: {describe(found[0])}.")


def describe(info: LockInfo) -> str:
    """One hold, for a message: name, kind, owner, label, token and lease left."""
    label = f", label {info.label!r}" if info.label else ""
    return (
        f"{info.shown_name} by {info.owner!r}{label} "
        f"(fencing token {info.fencing_token}, {info.ttl:.3g} s left)"
    )


def held_now(using: Using = None) -> str:
    """What is held on ``using``'s Redis, for an AssertionError (at most SHOWN holds)."""
    shown = list(itertools.islice(get_lock_manager(using).list(), SHOWN + 1))
    if not shown:
        return "Nothing is held."
    more = " (and more)" if len(shown) > SHOWN else ""
    return "Held now: " + "; ".join(describe(info) for info in shown[:SHOWN]) + more + "."


def captured(lock: Any) -> Captured:
    """The Captured of a Lock object that was just acquired."""
    name: str = lock.name
    if isinstance(lock, SharedLock):
        return Captured(name, _SHARED_KINDS.get(lock.kind, lock.kind))
    for kind, prefix in _PREFIXES.items():
        if name.startswith(prefix):
            return Captured(name[len(prefix) :], kind)
    return Captured(name, "lock")


@contextmanager
def captured_locks() -> Iterator[list[Captured]]:
    """The locks acquired in this process (any thread or task) inside the block, in order:
    ``with captured_locks() as taken: ...; assert taken == [Captured("report:7", "lock")]``.
    Read from the ``lock_acquired`` signal: every lock, semaphore place, read/write hold,
    leadership and unique key; a rate limit's admissions are not holds, and are not listed."""
    taken: list[Captured] = []

    def receiver(sender: object, lock: Any, **kwargs: Any) -> None:
        taken.append(captured(lock))

    lock_acquired.connect(receiver, weak=False, dispatch_uid=("django_redis_lock", id(taken)))
    try:
        yield taken
    finally:
        lock_acquired.disconnect(dispatch_uid=("django_redis_lock", id(taken)))


def assert_enqueued_once(task: Any, *args: Any, **kwargs: Any) -> LockInfo:
    """The hold of the unique key that enqueueing ``task(*args, **kwargs)`` takes (``task``: a
    @unique Celery or Django task): AssertionError, listing what is held, unless it is held
    once, by an enqueue or the run it handed it to. TypeError for a task not @unique."""
    key = key_of(task, *args, **kwargs)
    found = holds(key.name, "lock", key.using)
    if len(found) != 1:
        raise AssertionError(
            f"{key.name!r} (the unique key of {task!r} with these arguments) is not held: the "
            f"task was not enqueued, or its key ended. {held_now(key.using)}"
        )
    return found[0]
