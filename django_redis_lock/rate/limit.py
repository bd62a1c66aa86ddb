"""A rate limit: at most ``rate`` calls, plus ``burst``, in every window, across every process.

The state is one small hash on the Redis server, updated by one script per call
(``scripts/rate.py``, a generic cell rate algorithm on the server's clock): a call is admitted
when its turn has come, and a blocking call whose turn comes later takes that turn at once and
sleeps until it comes. Turns go out in the order calls reach the server; nobody polls, and one
round trip decides each call.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from django_redis_lock import metrics
from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend
from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockNotReplicated, LockUnavailable, RateLimited
from django_redis_lock.runtime import runtime
from django_redis_lock.scripts import decode_read
from django_redis_lock.validation import (
    Rate,
    refuse_contradiction,
    validate_blocking_timeout,
    validate_burst,
    validate_flag,
    validate_name,
    validate_rate,
    validate_template,
    validate_using,
)

# What a call of the scripts can fail with: a client error, too few replicas acknowledging.
_FAILURES: errors.ErrorTypes = (*errors.CLIENT, LockNotReplicated)
#: Microseconds in a second: the scripts count time in microseconds of the server's clock.
_US = 1_000_000


class Turn(NamedTuple):
    """What one call of a rate limit was told (see :meth:`RateLimit.reserve`)."""

    #: Whether the call was admitted: now, or at its turn ``wait`` seconds from now.
    admitted: bool
    #: Seconds until its turn (0.0: now); 0.0 when it was not admitted.
    wait: float
    #: Seconds until a call would be admitted (0.0 when this one was).
    retry_after: float
    #: When its turn comes (admitted) or when it was refused, by the Redis server's clock
    #: (seconds since the epoch).
    at: float


class RateLimit:
    """The rate limit ``name``: at most ``rate`` calls, plus ``burst`` at once after a quiet
    spell, in every window of the rate's period, whichever process makes them. See
    :func:`rate_limit`."""

    def __init__(
        self,
        name: str,
        rate: str,
        *,
        burst: int | None = None,
        using: str | None = None,
        template: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        #: The rate, checked: ``.calls`` per ``.period`` seconds, ``.text`` as given.
        self.rate: Rate = validate_rate(rate)
        #: Calls let through at once above the rate (0: none, the calls are spaced evenly).
        self.burst = validate_burst(burst)
        #: The name's template: the ``lock`` label of its metrics.
        self.template = validate_template(template)
        self._backend: Backend = runtime().for_locks(validate_using(using))
        # ImproperlyConfigured here for a backend that cannot hold one (a quorum).
        self._keys = self._backend.rate_keys_for(self.name)
        interval_us = self.rate.interval * _US
        self._args = (f"{interval_us:.3f}", str(self.burst), self.rate.text)
        self._label: str | None = None

    def __repr__(self) -> str:
        burst = f", burst {self.burst}" if self.burst else ""
        return f"<rate limit {self.name!r} ({self.rate.text}{burst})>"

    # -- admission ---------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, blocking_timeout: float | None = None) -> bool:
        """Admit one call: True at once when it is within the rate; else, ``blocking``, wait
        for its turn (at most ``blocking_timeout`` seconds: a turn that would come later is
        not taken, and False comes back at once), or False without waiting.

        A waiting call takes its turn before it sleeps: the turns go out in the order calls
        reach the server. A call interrupted while it sleeps (an exception, a cancellation)
        leaves its turn unused: the rate is never exceeded, a turn may be lost.
        """
        turn = self.reserve(_patience(blocking, blocking_timeout))
        if turn.wait > 0:
            time.sleep(turn.wait)
        return turn.admitted

    async def aacquire(self, blocking: bool = True, blocking_timeout: float | None = None) -> bool:
        """:meth:`acquire` for async code: the wait is an ``asyncio.sleep``."""
        turn = await self.areserve(_patience(blocking, blocking_timeout))
        if turn.wait > 0:
            await asyncio.sleep(turn.wait)
        return turn.admitted

    def reserve(self, max_wait: float | None = 0.0) -> Turn:
        """Take a turn without waiting for it: admitted with ``wait`` 0.0 when the call is
        within the rate now; admitted with the ``wait`` until its turn when that is at most
        ``max_wait`` seconds (None: whatever it is), the turn then being this call's, whoever
        comes next; else not admitted, with ``retry_after``. :meth:`acquire` is this and a
        sleep of ``wait``; a scheduler can instead run the work ``wait`` seconds later."""
        args = self._script_args(max_wait)
        try:
            if self._backend.wait_replicas:
                reply = self._backend.run_acked("rate_acquire", self._keys, args)
            else:
                reply = self._backend.run("rate_acquire", self._keys, args)
        except _FAILURES as exc:
            raise self._unavailable(exc) from exc
        return self._turn(reply)

    async def areserve(self, max_wait: float | None = 0.0) -> Turn:
        """:meth:`reserve` for async code."""
        args = self._script_args(max_wait)
        try:
            if self._backend.wait_replicas:
                reply = await self._backend.arun_acked("rate_acquire", self._keys, args)
            else:
                reply = await self._backend.arun("rate_acquire", self._keys, args)
        except _FAILURES as exc:
            raise self._unavailable(exc) from exc
        return self._turn(reply)

    def retry_after(self) -> float:
        """Seconds until a call at this rate would be admitted (0.0: now), by the server's
        clock; nothing is taken. It may be admitted sooner when others give up their turns,
        never by a call of another rate limit."""
        try:
            found = self._backend.run("rate_read_many", self._keys[:1], ())
        except errors.CLIENT as exc:
            raise self._unavailable(exc) from exc
        return self._waiting(found)

    async def aretry_after(self) -> float:
        """:meth:`retry_after` for async code."""
        try:
            found = await self._backend.arun("rate_read_many", self._keys[:1], ())
        except errors.CLIENT as exc:
            raise self._unavailable(exc) from exc
        return self._waiting(found)

    # -- ``with`` ----------------------------------------------------------------------------

    def __enter__(self) -> RateLimit:
        """Wait for a turn (as long as it takes): ``with rate_limit("api", "10/s"): ...``."""
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing to give back: a turn is spent when it is taken."""

    async def __aenter__(self) -> RateLimit:
        await self.aacquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Nothing to give back (see :meth:`__exit__`)."""

    def check(self) -> None:
        """Admit one call now or raise :class:`~django_redis_lock.RateLimited` (with its
        ``retry_after``): what ``@locked(rate=...)`` does for a function."""
        turn = self.reserve(0.0)
        if not turn.admitted:
            raise self.limited(turn.retry_after)

    async def acheck(self) -> None:
        """:meth:`check` for async code."""
        turn = await self.areserve(0.0)
        if not turn.admitted:
            raise self.limited(turn.retry_after)

    def limited(self, retry_after: float) -> RateLimited:
        """The RateLimited a refused call of this rate limit raises."""
        return RateLimited(
            f"Rate limit {self.name!r} ({self.rate.text}) is spent: "
            f"retry after {retry_after:.3g} s.",
            retry_after,
        )

    # -- the replies -------------------------------------------------------------------------

    def _script_args(self, max_wait: float | None) -> tuple[str, ...]:
        if max_wait is None:
            patience = "-1"
        else:
            seconds = validate_blocking_timeout(max_wait)
            patience = "0" if not seconds else f"{max(1.0, seconds * _US):.0f}"
        interval, burst, text = self._args
        return (interval, burst, patience, text, lock_settings.stats)

    def _unavailable(self, error: Exception) -> LockUnavailable:
        """What a failed call raises: a replica shortfall as it is (the turn was taken on the
        primary, which may forget it in a failover), a client error as LockUnavailable, both
        naming the rate limit (raise it ``from`` the error)."""
        if isinstance(error, LockNotReplicated):
            error.args = (f"Rate limit {self.name!r}: {error}",)
            return error
        if metrics.observers():
            metrics.unavailable(str(getattr(self._backend, "alias", "")))
        return LockUnavailable(f"Redis failed for rate limit {self.name!r}: {error}")

    def _turn(self, reply: Any) -> Turn:
        """The Turn an acquire script's reply says: a text when admitted, an array when not."""
        if isinstance(reply, list):
            retry_us, now_us = _number(reply[0]), _number(reply[1])
            self._count(admitted=False)
            return Turn(False, 0.0, retry_us / _US, now_us / _US)
        wait_us, now_us, _ = (_number(part) for part in _text(reply).split(":"))
        self._count(admitted=True)
        return Turn(True, wait_us / _US, 0.0, (now_us + wait_us) / _US)

    def _waiting(self, found: Any) -> float:
        """Seconds until a call would be admitted, from RATE_READ_MANY's reply for one key."""
        states = decode_read(found)
        state = states[0] if isinstance(states, list) and states else None
        if not isinstance(state, list) or len(state) < 5:
            return 0.0
        tat, now = _number(state[0], math.nan), _number(state[4])
        if math.isnan(tat):
            return 0.0
        wait = tat - self.burst * self.rate.interval * _US - now
        return max(0.0, math.ceil(wait) / _US)

    def _count(self, admitted: bool) -> None:
        if not metrics.observers():
            return
        if self._label is None:
            self._label = metrics.label_for(self.template or self.name)
        metrics.rate(self._label, admitted)


def _patience(blocking: object, blocking_timeout: object) -> float | None:
    """How long acquire() may wait for a turn: 0.0 not at all, None as long as it takes."""
    wait = validate_flag(blocking, "blocking")
    limit = validate_blocking_timeout(blocking_timeout)
    refuse_contradiction(wait, limit)
    if not wait:
        return 0.0
    return limit


def _text(reply: object) -> str:
    return reply.decode("ascii", "replace") if isinstance(reply, bytes) else str(reply)


def _number(value: object, default: float = 0.0) -> float:
    """A number the scripts wrote as text; ``default`` for anything else (another program's)."""
    try:
        number = float(_text(value))
    except ValueError:
        return default
    return number if math.isfinite(number) else default


def rate_limit(
    name: str,
    rate: str,
    *,
    burst: int | None = None,
    using: str | Sequence[str] | None = None,
) -> RateLimit:
    """The rate limit ``name``: at most ``rate`` calls ("100/s", "10/m", "5000/h", "1000/d")
    in every window of the rate's period, plus ``burst`` more at once after a quiet spell
    (None: 0, the calls spaced evenly), across every process that uses the name.

    ``acquire()`` / ``aacquire()`` admit a call (waiting for its turn unless told not to),
    ``retry_after()`` says how long until one would be admitted, ``with`` / ``async with`` wait
    for a turn. ``using`` picks the cache alias (None: REDIS_LOCK CACHE); a quorum of aliases
    is refused (ImproperlyConfigured): a rate kept apart on several primaries admits more than
    the rate whenever they disagree. Redis out of reach: LockUnavailable, as for locks.
    """
    return RateLimit(name, rate, burst=burst, using=using)  # type: ignore[arg-type]
