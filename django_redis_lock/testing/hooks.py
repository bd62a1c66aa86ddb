"""The test kit's faults, played with real holds on the real Redis: another holder
(:func:`make_busy`), a lease that ends (:func:`expire_now`), renewals held off
(:func:`pause_renewals`), a later holder that wrote (:func:`advance_fence`); :func:`reset`
ends what is left of them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from django_redis_lock.core.lock import Lock
from django_redis_lock.core.shared import rwlock, semaphore
from django_redis_lock.exceptions import LockBusy, LockError
from django_redis_lock.fencing.writes import declare_later_fence, forget_later_fences
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.records import LEADER_PREFIX, LockInfo
from django_redis_lock.runtime import runtime
from django_redis_lock.testing.assertions import held_now, holds, lock_name
from django_redis_lock.validation import MAX_OWNER_LENGTH

#: What make_busy() takes as ``kind``.
BUSY_KINDS = ("lock", "semaphore", "read", "write", "leader")
#: The owner text of the later hold that advance_fence() takes.
LATER_OWNER = "a later holder (advance_fence)"

Using = str | Sequence[str] | None

_mutex = threading.Lock()
_busy: list[Busy] = []  # what make_busy() holds, for reset()
_pauses: list[object] = []  # the pause_renewals() blocks under way, for reset()


class Busy:
    """The holds :func:`make_busy` took: ``release()`` ends them (``reset()`` does too); a
    context manager that releases them on exit."""

    def __init__(self, name: str, kind: str, holders: list[Lock]) -> None:
        #: The name made busy, and its kind, as make_busy() was given them.
        self.name, self.kind = name, kind
        #: The Lock objects that hold it (one per semaphore place).
        self.holders = holders

    @property
    def fencing_tokens(self) -> list[int]:
        """The fencing tokens of the holds still held."""
        return [held.fencing_token for held in self.holders if held.fencing_token is not None]

    def release(self) -> None:
        """Release every hold still held (one already ended, expired, or flushed away is
        passed over quietly)."""
        with _mutex:
            if self in _busy:
                _busy.remove(self)
        for held in self.holders:
            if held.fencing_token is not None and not held.lost:
                with suppress(LockError):  # ended meanwhile (expire_now, a flush)
                    held.release()

    def __enter__(self) -> Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Busy {self.name!r} ({self.kind}, {len(self.holders)} holds)>"


def _holders(name: str, kind: str, limit: int | None, using: Using) -> list[Lock]:
    if kind == "semaphore":
        if limit is None:
            raise ValueError('make_busy(kind="semaphore") needs limit: the places to take.')
        return [semaphore(name, limit, auto_renew=True, using=using) for _ in range(limit)]
    if limit is not None:
        raise ValueError(f"limit is for a semaphore, not kind={kind!r}.")
    if kind in ("read", "write"):
        lock = rwlock(name, auto_renew=True, using=using)
        return [lock.read() if kind == "read" else lock.write()]
    if kind == "leader":
        return [Lock(LEADER_PREFIX + name, auto_renew=True, using=using)]
    if kind != "lock":
        raise ValueError(f"kind must be one of {', '.join(map(repr, BUSY_KINDS))}, not {kind!r}.")
    return [Lock(name, auto_renew=True, using=using)]


def make_busy(
    name: str,
    *,
    owner: str = "another process",
    kind: str = "lock",
    limit: int | None = None,
    using: Using = None,
) -> Busy:
    """Have another holder hold ``name`` now: a real hold, taken from this process by Lock
    objects of the kit's own, whose owner is ``owner`` (as listings and the admin show it),
    renewed until released. ``@locked`` then answers 423, ``acquire(blocking=False)`` is False,
    a blocking acquire waits. ``kind``: "lock", "semaphore" (its ``limit`` places all taken),
    "read" (a reader: writers wait), "write" (the writer: everyone waits), "leader" (the
    leadership of ``name``). LockBusy when ``name`` is already held; the hold ends with the
    returned :class:`Busy`'s ``release()`` (or its ``with`` block), or :func:`reset`."""
    if not isinstance(owner, str) or not owner:
        raise TypeError(f"owner is a non-empty str, not {owner!r}.")
    if len(owner) > MAX_OWNER_LENGTH:
        raise ValueError(f"owner is at most {MAX_OWNER_LENGTH} characters long.")
    busy = Busy(name, kind, _holders(name, kind, limit, using))
    for held in busy.holders:
        held.owner = owner
        if not held.acquire(blocking=False):
            busy.release()
            raise LockBusy(f"make_busy({name!r}): it is held already. {held_now(using)}")
    with _mutex:
        _busy.append(busy)
    return busy


def expire_now(
    name: str, *, kind: str | None = None, using: Using = None, wait: float = 5.0
) -> list[LockInfo]:
    """End the lease of the current holds of ``name`` on the server now, as an eviction or a
    pause past the lease ends it, and have this process's watchdog look at once: every
    auto-renewed holder here has ``lost`` set (a Leadership its ``lost`` event, an ``async
    with`` leader its body cancelled) and ``lock_lost`` sent before this returns (within
    ``wait`` seconds, else TimeoutError). A hold without auto-renewal learns it at its next
    ``extend()``, ``owned()`` or ``release()``; inside :func:`pause_renewals`, when renewals
    resume. ``kind``: None for every hold of the name (lock, semaphore places, read/write
    holds), else one kind as :func:`~django_redis_lock.testing.held` takes it. What ended;
    AssertionError when nothing held it."""
    ended = []
    manager = get_lock_manager(using)
    for info in _current(name, kind, using):
        if manager.force_release(info.name, fencing_token=info.fencing_token) is not None:
            ended.append(info)
    if not ended:
        raise AssertionError(f"{lock_name(name, kind)!r} is not held. {held_now(using)}")
    watchdog = runtime().watchdog
    if not watchdog.check_now(wait) and not _pauses:
        raise TimeoutError(f"the watchdog did not look at the holds of {name!r} in {wait} s")
    return ended


def _current(name: str, kind: str | None, using: Using) -> list[LockInfo]:
    if kind == "rate":
        raise ValueError("a rate limit has no lease to end: reset it with the LockManager.")
    if kind is not None:
        return holds(name, kind, using)
    found = get_lock_manager(using).holders(lock_name(name, kind))
    return [info for info in found if info.kind != "rate"]


@contextmanager
def pause_renewals() -> Iterator[None]:
    """Hold this process's watchdog off inside the block: it renews no lease, so a short one
    runs out while held (a process paused by a long GC or a SIGSTOP). On exit (or
    :func:`reset`) it renews what fell due, and a hold whose lease ran out is found lost then."""
    token = object()
    watchdog = runtime().watchdog
    watchdog.pause()
    with _mutex:
        _pauses.append(token)
    try:
        yield
    finally:
        _end_pause(token)


def _end_pause(token: object) -> None:
    with _mutex:
        if token not in _pauses:  # ended by reset() already
            return
        _pauses.remove(token)
    runtime().watchdog.resume()


def advance_fence(name: str, *, using: Using = None) -> int:
    """A later holder took the lock ``name`` and wrote: the current hold ends on the server
    (its holder is not told: as a holder paused past its lease, it learns at its next renewal,
    ``extend()`` or ``release()``), a real later hold takes ``name`` (or the waiter it was
    handed to) and its fencing token is declared written, so that the earlier holder's next
    ``fenced_update`` or ``save(fence=...)`` on rows it matches raises StaleFencingToken, as
    those rows would after the later holder's write (see
    :func:`~django_redis_lock.fencing.writes.declare_later_fence`). A leadership's lock is
    ``"leader:<name>"``. The later token, above the current holder's."""
    manager = get_lock_manager(using)
    current = manager.get(name)
    if current is not None:
        manager.force_release(name, fencing_token=current.fencing_token)
    later = Lock(name, auto_renew=False, using=using)
    later.owner = LATER_OWNER
    if later.acquire(blocking=False):
        token = later.fencing_token
        later.release()
    else:  # handed to a waiter at once: that hold is the later one
        taken = manager.get(name)
        token = None if taken is None else taken.fencing_token
    if token is None:
        raise AssertionError(f"advance_fence({name!r}): no later hold could be taken.")
    declare_later_fence(name, token)
    return token


def reset() -> None:
    """Release what :func:`make_busy` holds, end :func:`pause_renewals` blocks and forget what
    :func:`advance_fence` declared. Call it before flushing the server (the pytest plugin's
    ``locks`` fixture and :class:`RedisLockTestMixin` do, after each test)."""
    with _mutex:
        busy, pauses = list(_busy), list(_pauses)
    for each in busy:
        each.release()
    for token in pauses:
        _end_pause(token)
    forget_later_fences()
