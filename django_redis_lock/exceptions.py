"""The exceptions raised by django_redis_lock."""

from __future__ import annotations


class LockError(Exception):
    """Base class of every error about a lock."""


class LockBusy(LockError):
    """The lock is held by someone else and could not be acquired in time."""


class LockNotOwned(LockError):
    """This Lock object does not hold the lock: never acquired, expired or force-released."""


class LockUnavailable(LockError):
    """Redis could not be reached or answered an error; the cause is chained."""


class LockNotReplicated(LockUnavailable):
    """Fewer replicas than REDIS_LOCK["WAIT_REPLICAS"] acknowledged a lock's write in time.

    ``acknowledged`` and ``needed`` count replicas; an acquire gave its hold back.
    """

    def __init__(self, message: str, acknowledged: int, needed: int, reply: object = None):
        super().__init__(message)
        self.acknowledged = acknowledged
        self.needed = needed
        #: What the primary answered to the write that was not acknowledged enough.
        self.reply = reply


class LateGrant(LockUnavailable):
    """Redis granted the lock, but its answer took as long as the lease: the lease may have
    ended before the holder heard of it, and someone else may hold the lock already. The grant
    was given back; a blocking acquire tries again within its ``blocking_timeout``, and only a
    non-blocking one (or one whose time is up) raises this."""


class LeadershipLost(LockError):
    """The leadership of a name was lost (a renewal found it taken, or none was confirmed
    before its lease ended), or was never taken: raised by ``Leadership.check()``, into an
    ``async with leader(...)`` body (which is cancelled), and on leaving a ``with`` block
    during which the leadership was lost."""


class RateLimited(LockBusy):
    """A call over a rate limit's rate that could not wait its turn (``@locked(rate=...)``:
    a view answers 429 instead). ``retry_after`` is how long until a call would be admitted,
    in seconds, by the Redis server's clock when it refused."""

    def __init__(self, message: str, retry_after: float):
        # Both in args: a result backend rebuilds it from them (Celery's JSON one does).
        super().__init__(message, retry_after)
        self.retry_after = retry_after

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class AlreadyQueued(LockBusy):
    """A task decorated with ``@unique`` was enqueued while its key was taken by another
    enqueue of the same key (``on_duplicate="raise"``). ``task_id`` names the task that holds
    the key, queued or running (None when its enqueue has not yet said which it is)."""

    def __init__(self, message: str, task_id: str | None = None):
        super().__init__(message)
        self.task_id = task_id


class Skipped(Exception):
    """What a run of a ``@unique`` task reports when it does not run: an earlier enqueue
    replaced by a later one (``on_duplicate="replace"``), or a task that found its key held by
    another task (a redelivered one), or one that already succeeded within
    ``keep_after_success``. ``task_id`` names the task it left the key to (None: not known)."""

    def __init__(self, message: str, task_id: str | None = None):
        # Both in args: a result backend rebuilds it from them (Celery's JSON one does).
        super().__init__(message, task_id)
        self.task_id = task_id

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StaleFencingToken(LockError):
    """A fenced write was refused: the row had accepted a later fencing token, so a later
    holder of the lock wrote it after this hold had ended. Nothing was written.

    ``lock`` names the lock (None when a bare token was given), ``token`` is the refused one,
    ``model`` the model's label, ``rows`` the primary keys of refused rows (at most five) and
    ``fence`` the token the first of them carries (None: the row a fenced ``save()`` would
    have written was deleted after the instance was read).
    """

    def __init__(
        self,
        message: str,
        *,
        lock: str | None,
        token: int,
        model: str,
        rows: list[object],
        fence: int | None,
    ):
        super().__init__(message)
        self.lock = lock
        self.token = token
        self.model = model
        self.rows = rows
        self.fence = fence
