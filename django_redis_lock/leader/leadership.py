"""Leadership: one holder of a name across every process and host, with an epoch.

A Leadership is a lock that is always auto-renewed, held for as long as its ``with`` block
runs, whose fencing token is the *epoch*: it goes up with each new leadership, so that the
storage a leader writes to can refuse what a deposed leader writes late (``fenced_update``
takes a Leadership as it takes a Lock). Loss is learnt from the lock's watchdog (a renewal that
finds the hold gone, or none confirmed before the lease ended): ``lost`` (an Event) is set at
once, ``check()`` raises, and an ``async with`` body is cancelled with :class:`LeadershipLost`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from django_redis_lock import metrics
from django_redis_lock.core.lock import Lock
from django_redis_lock.exceptions import LeadershipLost, LockBusy, LockError
from django_redis_lock.ops.records import LEADER_PREFIX
from django_redis_lock.signals import lock_lost
from django_redis_lock.validation import validate_name

logger = logging.getLogger("django_redis_lock")

#: The name a leadership's lock has: a prefix of its own, so that operators see it as such.
PREFIX = LEADER_PREFIX

# The leaderships under way, by the id of their lock: lock_lost reaches them through it.
_leading: weakref.WeakValueDictionary[int, Leadership] = weakref.WeakValueDictionary()
_leading_mutex = threading.Lock()


def _on_lock_lost(sender: type, lock: Lock, **_: Any) -> None:
    """lock_lost's receiver: a leadership whose lock it is learns the loss (from any thread)."""
    leadership = _leading.get(id(lock))
    if leadership is not None and leadership.holds(lock):
        leadership.deposed()


lock_lost.connect(_on_lock_lost, dispatch_uid="django_redis_lock.leader")


class Leadership:
    """The leadership of ``name``: ``with``/``async with`` waits to lead, then leads until the
    block ends (or the leadership is lost). See :func:`leader`."""

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None = None,
        blocking_timeout: float | None = None,
        label: str | None = None,
        using: str | Sequence[str] | None = None,
    ) -> None:
        self._lock = Lock(
            PREFIX + validate_name(name),  # the name's own errors, then the whole one's
            timeout=timeout,
            blocking_timeout=blocking_timeout,
            auto_renew=True,  # a leader leads until it resigns: never for one lease only
            label=label,
            using=using,
            template=PREFIX + name,  # its metrics' label: a leadership's name, not a template
        )
        #: The leadership's name, as given.
        self.name = name
        #: Set when the leadership was found lost (by the watchdog, from its thread); cleared
        #: when it leads again.
        self.lost = threading.Event()
        self._on_loss: list[Callable[[], object]] = []
        self._counted = False  # whether the leader gauge counts this leadership
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelled = False

    def __repr__(self) -> str:
        state = f"leading, epoch {self.epoch}" if self.is_leader else "not leading"
        return f"<Leadership {self.name!r} {state}>"

    @property
    def lock(self) -> Lock:
        """The lock behind it, named ``leader:<name>`` (as ``manage.py locks`` and the admin
        show it): what ``fenced_update`` and ``save(fence=...)`` take to fence a write with the
        epoch."""
        return self._lock

    @property
    def epoch(self) -> int | None:
        """The fencing token of the current leadership (higher with each new one): hand it to
        the storage, or to ``fenced_update``, with each write. None before it leads and once it
        resigned; after a loss, the lost leadership's (which the storage then refuses)."""
        return self._lock.fencing_token

    @property
    def is_leader(self) -> bool:
        """Whether this object leads, as far as this process knows (no round trip): it took the
        leadership and no renewal has found it lost since."""
        return self._lock.fencing_token is not None and not self.lost.is_set()

    def holds(self, lock: Lock) -> bool:
        """Whether ``lock`` is this leadership's lock."""
        return lock is self._lock

    def check(self) -> None:
        """Raise :class:`LeadershipLost` unless this object leads (call it between steps of
        the work, before each write that the epoch does not fence)."""
        if not self.is_leader:
            raise LeadershipLost(f"The leadership of {self.name!r} was lost (or never taken).")

    # -- taking and giving up ----------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take the leadership (wait for it unless ``blocking`` is False); True when leading."""
        self._led()
        taken = self._lock.acquire(blocking, blocking_timeout)
        if taken:
            self._leads()
        return taken

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code."""
        self._led()
        taken = await self._lock.aacquire(blocking, blocking_timeout)
        if taken:
            self._leads()
        return taken

    def release(self) -> None:
        """Resign: a follower waiting for the leadership takes it at once. LockNotOwned if
        this object does not lead."""
        try:
            self._lock.release()
        finally:
            self._led()

    async def arelease(self) -> None:
        """:meth:`release` for async code."""
        try:
            await self._lock.arelease()
        finally:
            self._led()

    def _leads(self) -> None:
        self.lost.clear()
        with _leading_mutex:
            _leading[id(self._lock)] = self
        self._counted = True
        metrics.leading(self._lock.name, True)

    def _led(self) -> None:
        with _leading_mutex:
            if _leading.get(id(self._lock)) is self:
                del _leading[id(self._lock)]
        self._uncount()

    def _uncount(self) -> None:
        """The leader gauge comes down once per leadership (a loss, then the resignation)."""
        if self._counted:
            self._counted = False
            metrics.leading(self._lock.name, False)

    def on_loss(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` each time the leadership is found lost, from the thread that
        found it (the watchdog's): keep it short, as a signal receiver. A callback that raises
        is logged."""
        self._on_loss.append(callback)

    def deposed(self) -> None:
        """The leadership was found lost: ``lost`` is set, the :meth:`on_loss` callbacks are
        called, and an ``async with`` body that runs is cancelled (it sees
        :class:`LeadershipLost`). Called when the lock's loss is found."""
        self.lost.set()
        self._uncount()
        for callback in self._on_loss:
            try:
                callback()
            except Exception:
                logger.exception("A loss callback of the leadership of %r raised.", self.name)
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._cancel, task)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        if self._task is task and not task.done():
            self._cancelled = True
            task.cancel(f"The leadership of {self.name!r} was lost.")

    # -- with and async with -------------------------------------------------------------------

    def __enter__(self) -> Leadership:
        if not self.acquire():
            raise LockBusy(f"Could not take the leadership of {self.name!r} in time.")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._resign_on_exit(exc_type, lost=self.lost.is_set())

    async def __aenter__(self) -> Leadership:
        # Known before it leads: a loss found the moment it leads still cancels the body.
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        self._cancelled = False
        if not await self.aacquire():
            self._loop = self._task = None
            raise LockBusy(f"Could not take the leadership of {self.name!r} in time.")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        task, cancelled = self._task, self._cancelled
        self._loop, self._task, self._cancelled = None, None, False
        lost = self.lost.is_set()
        try:
            await self.arelease()
        except LockError:
            if exc_type is None and not lost:
                raise
        if cancelled and exc_type is asyncio.CancelledError and task is not None:
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancel was ours
            if uncancel is not None:
                uncancel()
            raise LeadershipLost(f"The leadership of {self.name!r} was lost.") from exc
        if exc_type is None and lost:
            raise LeadershipLost(f"The leadership of {self.name!r} was lost during the block.")
        return False

    def _resign_on_exit(self, exc_type: type[BaseException] | None, *, lost: bool) -> None:
        try:
            self.release()
        except LockError:
            if exc_type is None and not lost:
                raise
        if exc_type is None and lost:
            raise LeadershipLost(f"The leadership of {self.name!r} was lost during the block.")


def leader(
    name: str,
    *,
    timeout: float | None = None,
    blocking_timeout: float | None = None,
    label: str | None = None,
    using: str | Sequence[str] | None = None,
) -> Leadership:
    """The leadership of ``name``, not yet taken: ``with leader("beat"):`` waits to lead
    (``blocking_timeout`` caps the wait: then LockBusy), then leads while the block runs.

    ``timeout`` is the lease (None: REDIS_LOCK TIMEOUT), renewed by the watchdog at a third of
    it: a leader that dies is replaced within about one lease. ``epoch`` is a fencing token,
    higher with each new leadership; ``lost`` (a ``threading.Event``) is set when the
    leadership is found lost, ``check()`` raises :class:`LeadershipLost` then, and an
    ``async with`` body is cancelled with it. ``label`` and ``using`` are a lock's.
    """
    return Leadership(
        name, timeout=timeout, blocking_timeout=blocking_timeout, label=label, using=using
    )
