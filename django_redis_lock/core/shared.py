"""Locks with several holders at once: a semaphore (at most ``limit`` holders) and a read/write
lock (any number of readers, or one writer).

Each holder is a Lock object of its own, with the Lock's whole API: its own lease (renewed by
the watchdog as a lock's; a crashed holder's place comes back when its lease ends), its own
fencing token (the tokens of a name only go up, whoever holds), its own release. Waiters queue
in arrival order and are woken by the release that frees a place, through the process's one
pub/sub connection, as a lock's are. The scripts: ``scripts/shared.py``. Not on a quorum: a
quorum keeps a lock on a majority of primaries, and its waiters do not queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from django_redis_lock.core.lock import Lock
from django_redis_lock.validation import validate_limit

if TYPE_CHECKING:
    from typing_extensions import Unpack


class SharedLock(Lock):
    """One holder of a semaphore's places, or one reader or the writer of a read/write lock:
    a Lock whose acquire waits for a place instead of the whole lock."""

    #: "s": a semaphore's place, "r": a reader, "w": the writer.
    kind: str
    #: The most holders at once (a semaphore's; a read/write lock has no limit but its own).
    limit: int | None
    #: A counter of the name's statistics (such as ``scripts.stats.AVOIDED``) that this hold's
    #: release adds one to, in its own script (no round trip more); None: none.
    tally: str | None = None

    def __init__(self, name: str, kind: str, limit: int | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self.kind, self.limit = kind, limit
        self._keys = self._backend.shared_keys_for(self.name, kind)

    def _acquire_extra(self) -> tuple[Any, ...]:
        return (self.kind, self.limit or 1)

    def _release_extra(self) -> tuple[Any, ...]:
        return (self.tally,) if self.tally else ()

    def __repr__(self) -> str:
        what = {"s": f"semaphore (limit {self.limit})", "r": "read lock", "w": "write lock"}
        return f"<{what[self.kind]} {self.name!r}>"


class LockOptions(TypedDict, total=False):
    """The options a semaphore and a read/write lock take, as :func:`lock` does."""

    timeout: float | str | None
    blocking: bool
    blocking_timeout: float | None
    auto_renew: bool | None
    label: str | None
    using: str | Sequence[str] | None
    template: str | None


def _checked(options: dict[str, Any], what: str) -> dict[str, Any]:
    """``options``, or TypeError naming the first that ``what`` does not take (a semaphore
    has no ``reentrant``; a read/write lock has no ``limit``): never accepted and ignored."""
    for option in options:
        if option not in LockOptions.__optional_keys__:
            raise TypeError(f"{what}() got an unexpected keyword argument {option!r}")
    return options


def semaphore(name: str, limit: int, **options: Unpack[LockOptions]) -> SharedLock:
    """One holder of the semaphore ``name``: at most ``limit`` hold it at once.

    ``options``: ``timeout``, ``blocking``, ``blocking_timeout``, ``auto_renew``, ``label``,
    ``using`` and ``template``, as for :func:`~django_redis_lock.lock`. The object has the
    Lock's API (``acquire``, ``release``, ``extend``, ``with``, their async twins,
    ``fencing_token``, ``lost``...); create one per holder, as ``lock()``'s. Each place has its
    own lease, renewed while held; a crashed holder's place comes back when its lease ends. The
    limit is each acquire's own: a holder is let in when fewer than its ``limit`` hold the name,
    whatever limit the others came with (a smaller one does not take places from holders already
    in; a larger one lets more in at once). A waiter is handed a freed place under its own limit
    too, in arrival order: one whose limit the holders still fill waits, and those behind it wait
    behind it.
    """
    return SharedLock(name, "s", validate_limit(limit), **_checked(dict(options), "semaphore"))


class ReadWriteLock:
    """The read/write lock ``name``: any number of readers at once, or one writer.

    ``options`` as for :func:`semaphore`. ``read()`` and ``write()`` give a holder, a Lock-like
    object (one per critical section, as ``lock()``'s). Waiters are served in arrival order: a
    reader that comes while a writer waits waits behind it, so a stream of readers never
    starves a writer.
    """

    def __init__(self, name: str, **options: Unpack[LockOptions]) -> None:
        self._options = _checked(dict(options), "rwlock")
        self.name = SharedLock(name, "r", **options).name  # the name and options checked now

    def read(self) -> SharedLock:
        """A reader: holds the lock with other readers, never with the writer."""
        return SharedLock(self.name, "r", **self._options)

    def write(self) -> SharedLock:
        """The writer: holds the lock alone."""
        return SharedLock(self.name, "w", **self._options)

    def __repr__(self) -> str:
        return f"<read/write lock {self.name!r}>"


#: ``rwlock(name, *, timeout=None, blocking=True, blocking_timeout=None, auto_renew=None,
#: label=None, using=None)``: a read/write lock, with ``.read()`` and ``.write()``.
rwlock = ReadWriteLock
