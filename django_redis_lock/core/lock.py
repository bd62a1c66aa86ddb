"""The Lock: acquire, release and extend one named lock, from sync or async code.

Ownership belongs to the Lock object: each acquisition gets a random secret, and only the
object that holds it can release or extend that hold. Create one Lock per critical section
(``with lock("name"):``); a Lock object is not meant to be shared by concurrent threads or
tasks.

Each operation is written once, as a flow (``flows.py``: a generator of steps); the public
methods here hand it to the sync or the async driver (``drivers.py``), and only the drivers
talk to Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django_redis_lock import metrics
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.attempts import Acquired
from django_redis_lock.core.drivers import adrive, drive
from django_redis_lock.core.flows import LockFlows
from django_redis_lock.core.holding import Holding, blocking_wait
from django_redis_lock.core.steps import Call, Flow
from django_redis_lock.runtime import runtime
from django_redis_lock.runtime.holds import Hold
from django_redis_lock.scripts import decode_read
from django_redis_lock.stats import LockStats
from django_redis_lock.validation import (
    holding_options,
    seconds_to_ms,
    validate_flag,
    validate_label,
    validate_name,
    validate_template,
    validate_timeout,
    validate_using,
    wait_options,
)


class Lock(Holding, LockFlows):
    """A named distributed lock, not yet acquired; use it in ``with`` or call ``acquire()``.

    ``timeout`` is the lease in seconds (None: REDIS_LOCK TIMEOUT; "auto": the timeout the lock's
    statistics suggest once they know enough, REDIS_LOCK TIMEOUT before); ``blocking_timeout`` caps
    the wait (None: no limit); ``auto_renew`` keeps the lease alive while held (None:
    REDIS_LOCK AUTO_RENEW); ``reentrant`` lets the same object acquire again; ``label`` is
    shown to operators; ``using`` picks the cache alias (None: REDIS_LOCK CACHE); ``template``
    is the name's template (``"invoice:{invoice_id}"``), the ``lock`` label of its metrics
    (None: REDIS_LOCK METRICS_OTHER).
    ``django_redis_lock.lock`` is this class.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout: float | str | None = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool | None = None,
        reentrant: bool = False,
        label: str | None = None,
        using: str | Sequence[str] | None = None,
        template: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        #: The name's template: the ``lock`` label of the lock's metrics.
        self.template = validate_template(template)
        # The current hold as the metrics saw it begin, if any observe it.
        self._metered: metrics.HoldRecord | None = None
        self._label: str | None = None  # its metrics' lock label, once known
        ms = validate_timeout(timeout, "timeout") if timeout is not None else None
        #: Whether the timeout is the statistics' suggestion (``timeout="auto"``).
        self._auto_timeout = lock_settings.auto_timeout if timeout is None else ms is None
        # Until the statistics suggest one (``auto``): REDIS_LOCK TIMEOUT (30 s for "auto").
        self._timeout_ms = lock_settings.timeout_ms if ms is None else ms
        self._blocking, self._blocking_timeout, self._auto_renew = holding_options(
            blocking, blocking_timeout, auto_renew, lock_settings.auto_renew
        )
        self._reentrant = validate_flag(reentrant, "reentrant")
        self.label = validate_label(label)
        #: The owner text the next holds record, shown to operators; None (the default): this
        #: process and thread (or task). The test kit's ``make_busy(owner=...)`` sets it.
        self.owner: str | None = None
        self._backend = runtime().for_locks(validate_using(using))
        self._keys = self._backend.keys_for(self.name)
        self._secret: str | None = None
        self._depth = 0
        self._hold: Hold | None = None
        #: The fencing token of this object's current hold; None when it holds nothing.
        self.fencing_token: int | None = None
        #: True once a call found the hold taken away (see the README).
        self.lost = False
        # Set by the first to find the hold gone, before ``lost``: a loss is reported once.
        self._losing = False
        #: Seconds left of the holder's lease when this object last found the lock busy.
        self.busy_ttl: float | None = None
        #: Seconds the holder had held the lock then (None: not known).
        self.busy_held: float | None = None
        # How long the current hold's acquire waited for another holder, recorded by its
        # release (ms), and whether the acquire under way found the lock held.
        self._waited_ms, self._was_busy = 0, False

    def __repr__(self) -> str:
        state = "held" if self._secret is not None else "not held"
        return f"<Lock {self.name!r} {state}>"

    @property
    def timeout(self) -> float:
        """The lease in seconds: how long the lock lives unless renewed."""
        return self._timeout_ms / 1000

    # -- the public methods: each hands its flow to a driver -------------------------------

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take the lock; wait for it unless ``blocking`` is False; True when taken."""
        wait, limit = blocking_wait(
            f"Lock.acquire() of {self.name!r}",
            blocking,
            blocking_timeout,
            self._blocking,
            self._blocking_timeout,
        )
        owner = self.owner or runtime().thread_owner()
        observed = metrics.observers()
        if not observed:
            return drive(self._backend, self._acquiring(wait, limit, owner), self.name)
        call = metrics.Acquisition(self, self._metrics_label(), self._backend, observed)
        try:
            acquired = drive(self._backend, self._acquiring(wait, limit, owner), self.name)
        except BaseException as exc:
            call.done(False, wait, exc)
            raise
        call.done(acquired, wait and limit != 0)
        return acquired

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code: waiting never blocks the event loop."""
        wait, limit = wait_options(
            blocking, blocking_timeout, self._blocking, self._blocking_timeout
        )
        owner = self.owner or runtime().task_owner()
        observed = metrics.observers()
        if not observed:
            return await adrive(self._backend, self._acquiring(wait, limit, owner), self.name)
        call = metrics.Acquisition(self, self._metrics_label(), self._backend, observed)
        try:
            acquired = await adrive(self._backend, self._acquiring(wait, limit, owner), self.name)
        except BaseException as exc:
            call.done(False, wait, exc)
            raise
        call.done(acquired, wait and limit != 0)
        return acquired

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return drive(self._backend, self._locked(), self.name)

    async def alocked(self) -> bool:
        """:meth:`locked` for async code."""
        return await adrive(self._backend, self._locked(), self.name)

    def owned(self) -> bool:
        """Whether this object holds the lock (asks Redis: an expired hold is not owned).

        A hold found taken away is marked lost (once), as the watchdog, ``extend()`` and
        ``release()`` do: ``lost`` becomes True, a warning is logged, ``lock_lost`` is sent.
        """
        return drive(self._backend, self._owned(), self.name)

    async def aowned(self) -> bool:
        """:meth:`owned` for async code."""
        return await adrive(self._backend, self._owned(), self.name)

    def stats(self) -> LockStats | None:
        """The lock's hold and wait statistics (None: nothing recorded yet); read from Redis
        at most once a minute per process, as ``timeout="auto"`` and a busy view's
        Retry-After use them."""
        return drive(self._backend, self._statistics(), self.name)

    async def astats(self) -> LockStats | None:
        """:meth:`stats` for async code."""
        return await adrive(self._backend, self._statistics(), self.name)

    def ttl(self) -> float | None:
        """Seconds left of the lease, or None when nobody holds the lock (``math.inf`` for a
        held lock whose key lost its expiry, as :class:`LockInfo` shows it)."""
        return drive(self._backend, self._ttl(), self.name)

    async def attl(self) -> float | None:
        """:meth:`ttl` for async code."""
        return await adrive(self._backend, self._ttl(), self.name)

    def take_over(
        self,
        label: str,
        accept: Callable[[str], bool] | None = None,
        lease: float | None = None,
    ) -> tuple[str | None, bool]:
        """Give a hold of this lock's name this thread as owner, ``label`` and a lease of
        ``lease`` seconds (None: the lock's timeout), this object holding it after: the hold
        this object has; or, holding none, whichever hold the name has (another Lock
        object's, another process's: a unique task's key passes so from its enqueue to its
        worker) if ``accept(its label)`` (None: any). The hold keeps its fencing token; its
        secret never leaves the lock.

        Returns the label the hold had (None: nobody holds the name, or this object's hold was
        lost: marked so) and whether this object holds it now.
        """
        flow = self._taking_over(runtime().thread_owner(), label, accept, lease)
        return drive(self._backend, flow, self.name)

    async def atake_over(
        self,
        label: str,
        accept: Callable[[str], bool] | None = None,
        lease: float | None = None,
    ) -> tuple[str | None, bool]:
        """:meth:`take_over` for async code (this task as owner)."""
        flow = self._taking_over(runtime().task_owner(), label, accept, lease)
        return await adrive(self._backend, flow, self.name)

    def _taking_over(
        self,
        owner: str,
        label: str,
        accept: Callable[[str], bool] | None,
        lease: float | None,
    ) -> Flow[tuple[str | None, bool]]:
        """:meth:`take_over`'s flow, written once for both drivers."""
        ms = self._timeout_ms if lease is None else seconds_to_ms(lease, "lease")
        extend, keys = self._keys.script("extend"), (self._keys.lock, self._keys.stats)
        if self._holding():
            args = [self._secret, ms, "replace", "", owner, label]
            if not (yield Call(extend, keys, args, acked=True)):
                self._lose()
                return None, False
            found, self.label = self.label, label
            return found, True
        read = Call(self._keys.script("read"), (self._keys.lock,), ("",))
        values = decode_read((yield read))  # anything read may be garbage: checked below
        secret, token, found = values[0], values[1], values[3]
        if not secret or not isinstance(secret, str):
            return None, False
        found = found if isinstance(found, str) else ""
        if accept is not None and not accept(found):
            return found, False
        if not (yield Call(extend, keys, [secret, ms, "replace", "", owner, label], acked=True)):
            return found, False  # that hold ended meanwhile
        try:
            number = int(token)
        except (TypeError, ValueError):
            number = 0  # a token someone else wrote: the hold is taken over all the same
        self.label = label
        return found, self._took(secret, Acquired(number, handed_over=False))
