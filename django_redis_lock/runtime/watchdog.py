"""The watchdog: one thread per process keeping auto-renewed locks alive while they are held.

Each hold is renewed at about a third of its TTL (to at least the TTL, never shortening a
longer ``extend()``). A renewal that finds the lock gone marks the hold lost, sends
``lock_lost`` and logs a warning. The watchdog keeps only a weak reference to each Lock, so
a Lock object dropped without release stops being renewed and expires on its own. After
``fork`` the child starts with an empty watchdog: it never renews its parent's locks.

The thread starts with the first auto-renewed hold and then looks at its holds at least once
a second (a few microseconds each time), so that the common hold, first due seconds later, is
registered and released without a lock or a wake-up call on the acquiring thread.

It also settles acquire attempts and releases whose caller never learned the outcome (Redis
stalled past the socket timeout, or the reply was lost): Redis may still run such an attempt
when it resumes and grant the lock to a secret nobody holds, and a release that did not run
leaves the lock held with nobody renewing it. The watchdog sends LEAVE (or the RELEASE again)
until Redis answers, so such a hold ends as soon as Redis is back, not when its lease does.
A stalled Redis, once it resumes, runs the commands already waiting in its sockets before
those of a connection made later; where that order does not hold (a network that delivers
the first command last), the grant lives no longer than its lease.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

from django_redis_lock import metrics, signals
from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend
from django_redis_lock.runtime.holds import MIN_RETRY_SECONDS, Hold, Settle

logger = logging.getLogger("django_redis_lock")

# The longest pause between two tries to settle an attempt.
_MAX_SETTLE_RETRY_SECONDS = 0.5
# The most attempts waiting to be settled; beyond it (a long outage) the oldest grants that may
# exist are left to end with their lease.
_MAX_SETTLES = 10_000


# Once started, the thread looks at least this often, so that a hold due later than that is
# handed to it with a bare append: no lock, no wake-up call, on the path of every acquire.
_TICK_SECONDS = 1.0
# The heap's size at which the thread first drops released holds from it all at once.
_COMPACT_AT = 1024


class Watchdog:
    """Renews every registered hold from a single daemon thread."""

    def __init__(self) -> None:
        mutex = threading.Lock()
        self._cond = threading.Condition(mutex)
        # Where check_now() waits (apart: a notify() meant for the thread must not wake it).
        self._looked_cond = threading.Condition(mutex)
        self._due: list[tuple[float, int, Hold | Settle]] = []
        # Holds due a tick or more from now, added without the lock, by id; the thread takes
        # them. A release takes its hold back out at once: most holds end within the tick, and
        # a hold dropped then dies young (the garbage collector never moves it to an older
        # generation, whose collections cost a busy process dearly).
        self._incoming: dict[int, Hold] = {}
        self._order = itertools.count()
        self._compact_at = _COMPACT_AT
        self._thread: threading.Thread | None = None
        # True while the thread runs its loop: it then looks at least every tick.
        self._ticking = False
        # When the thread wakes next on its own; a hold due earlier needs a wake-up call.
        self._wakes_at = float("inf")
        self._settles = 0  # calls scheduled to be settled
        # Until when each Redis counts as away: settling waits instead of trying every call.
        self._away: dict[Backend, float] = {}
        self._pauses = 0  # pause() calls not yet resumed: renew nothing meanwhile
        # Looks asked for by check_now(), the one the batch under way serves, the last served.
        self._asked = self._serving = self._looked = 0

    def add(self, hold: Hold) -> None:
        """Start renewing ``hold``, first at a third of the lease it starts with."""
        if self._ticking and hold.first >= _TICK_SECONDS:
            self._incoming[id(hold)] = hold  # atomic; the thread looks before it is due
            return
        with self._cond:
            self._schedule(hold, hold.due)
            self._start()

    def discard(self, hold: Hold | None) -> None:
        """:meth:`remove` ``hold`` if there is one (an object's hold, taken out of it)."""
        if hold is not None:
            self.remove(hold)

    def remove(self, hold: Hold) -> None:
        """Stop renewing ``hold``: no renewal starts for it after this returns."""
        hold.watched = False  # the thread drops it when it comes across it
        self._incoming.pop(id(hold), None)  # atomic; if the thread took it, it is in the heap

    def pause(self) -> None:
        """Renew (and settle) nothing until as many :meth:`resume` calls: the process as if
        paused past its leases. A public seam of the test kit's ``pause_renewals()``."""
        with self._cond:
            self._pauses += 1

    def resume(self) -> None:
        """End one :meth:`pause`: what fell due meanwhile is renewed at once (a lease that ran
        out is then found lost)."""
        with self._cond:
            self._pauses = max(0, self._pauses - 1)
            self._cond.notify()

    def check_now(self, timeout: float = 5.0) -> bool:
        """Renew every watched hold now; wait (at most ``timeout`` s) until done: a hold found
        gone is marked lost (``lost``, ``lock_lost``) once this returns True (False: timed out,
        or paused). A public seam of the test kit's ``expire_now()``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._take_incoming()
            now = time.monotonic()
            self._due = [(now if isinstance(i, Hold) else at, n, i) for at, n, i in self._due]
            heapq.heapify(self._due)
            busy = self._wakes_at == float("-inf")  # a batch under way: its holds not here
            if not busy and not any(isinstance(i, Hold) and i.watched for _, _, i in self._due):
                return not self._pauses  # nothing watched
            self._asked += 1
            asked = self._asked
            self._cond.notify()
            while self._looked < asked:
                left = deadline - time.monotonic()
                if left <= 0 or self._pauses:
                    return False
                self._looked_cond.wait(left)
        return True

    def settle(self, call: Settle) -> None:
        """Run ``call``'s script (LEAVE for an attempt, RELEASE again for a release) until
        Redis answers."""
        parts = call.backend.parts(call.keys, call.script)
        if parts != [(call.backend, call.keys, call.script)]:  # on each primary, on its own
            for backend, keys, script in parts:
                self.settle(Settle(backend, keys, call.args, script))
            return
        with self._cond:
            if self._settles >= _MAX_SETTLES:
                logger.warning("Too many lock attempts to settle; a grant may outlive its caller.")
                return
            self._settles += 1
            self._schedule(call, time.monotonic())
            self._start()

    def _start(self) -> None:
        """Start the thread unless it runs (called with the lock held)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="django_redis_lock-watchdog", daemon=True
            )
            self._thread.start()

    def _schedule(self, hold: Hold | Settle, when: float) -> None:
        heapq.heappush(self._due, (when, next(self._order), hold))
        if when < self._wakes_at:
            self._cond.notify()

    def _take_incoming(self) -> None:
        """Move holds added without the lock into the heap (called with the lock held)."""
        while True:
            try:
                hold = self._incoming.popitem()[1]
            except KeyError:  # empty; remove() takes holds out too, from other threads
                break
            if hold.watched:
                heapq.heappush(self._due, (hold.due, next(self._order), hold))
        if len(self._due) > self._compact_at:  # mostly released holds, as a rule
            self._due = [entry for entry in self._due if entry[2].watched]
            heapq.heapify(self._due)
            self._compact_at = max(_COMPACT_AT, 2 * len(self._due))

    def _next_batch(self) -> list[Hold | Settle]:
        """Wait until some holds (or attempts to settle) are due and return them."""
        with self._cond:
            while True:
                self._take_incoming()
                while self._due and not self._due[0][2].watched:
                    heapq.heappop(self._due)
                now = time.monotonic()
                due = self._due[0][0] if self._due else float("inf")
                if due > now or self._pauses:
                    wake = now + _TICK_SECONDS if self._pauses else min(due, now + _TICK_SECONDS)
                    if not self._pauses:  # nothing due: every look asked for was served
                        self._looked = self._asked
                        self._looked_cond.notify_all()
                    self._wakes_at = wake
                    self._cond.wait(wake - now)
                    continue
                self._wakes_at = float("-inf")  # busy renewing: it looks at the heap again
                self._serving = self._asked
                batch = []
                while self._due and self._due[0][0] <= now:
                    hold = heapq.heappop(self._due)[2]
                    if hold.watched:
                        batch.append(hold)
                return batch

    def _run(self) -> None:
        self._ticking = True
        try:
            while True:
                for item in self._next_batch():
                    if isinstance(item, Settle):
                        self._settle(item)
                        continue
                    try:
                        self._renew(item)
                    except Exception as exc:  # a renewal not confirmed, whatever the reason
                        self._retry(item, exc)
                with self._cond:
                    self._looked = self._serving
                    self._looked_cond.notify_all()
        finally:  # only a bug ends the loop: the next add starts a new thread
            self._ticking = False
            with self._cond:
                self._thread = None

    def _renew(self, hold: Hold) -> None:
        if hold.owner() is None:  # the Lock object is gone: let its lease run out
            self.remove(hold)
            return
        sent = time.monotonic()
        left = hold.renew()
        if not left:
            self._lose(hold)
            return
        metrics.renewal("renewed")
        with self._cond:
            hold.renewed(sent, left)
            if hold.watched:
                if hold.repeat:  # at once if a look was asked for since this renewal began
                    again = self._asked > self._serving
                    self._schedule(hold, time.monotonic() if again else sent + hold.interval)
                else:
                    hold.watched = False

    def _retry(self, hold: Hold, exc: Exception) -> None:
        now = time.monotonic()
        metrics.renewal("failed")
        if now >= hold.lease_end:
            logger.warning("Could not renew lock %r before its lease ended: %s", hold.name, exc)
            self._lose(hold, metrics.RENEWAL_FAILED)
            # Redis may still have the hold, renewed (a renewal that replicas did not
            # acknowledge, a reply lost): give it back once Redis answers, not at its lease end.
            for call in hold.give_back():
                self.settle(call)
            return
        logger.warning(
            "Could not renew lock %r (%s); retrying before its lease ends.", hold.name, exc
        )
        held = hold.owner() if hold.watched else None  # released meanwhile: nothing to say
        if held is not None:  # alerting can fire before the lease runs out
            signals.send(
                signals.lock_renewal_failed,
                held,
                held.fencing_token,
                error=exc,
                lease_left=max(0.0, hold.lease_end - now),
            )
        with self._cond:
            if hold.watched:
                delay = min(hold.interval, max(MIN_RETRY_SECONDS, (hold.lease_end - now) / 2))
                self._schedule(hold, now + delay)

    def _settle(self, call: Settle) -> None:
        now = time.monotonic()
        away_until = self._away.get(call.backend, 0.0)
        if now < away_until < call.give_up:  # a try on this Redis just failed: wait with it
            with self._cond:
                self._schedule(call, away_until)
            return
        try:
            call.backend.run(call.script, call.keys.all, call.args)
        except Exception as exc:
            # A cluster failing over answers too (CLUSTERDOWN, MOVED): it is still away.
            answered = isinstance(exc, errors.RESPONSE) and not isinstance(exc, errors.CLUSTER_AWAY)
            if answered:  # Redis answered: there is nothing to wait for
                logger.warning("Could not settle an interrupted lock call: %s", exc)
            elif now < call.give_up:  # Redis still away (or another library's error)
                call.delay = min(call.delay * 2, _MAX_SETTLE_RETRY_SECONDS)
                self._away[call.backend] = now + call.delay  # one try per Redis meanwhile
                with self._cond:
                    self._schedule(call, now + call.delay)
                return
            else:
                logger.warning("Gave up settling an interrupted lock call: %s", exc)
        else:
            self._away.pop(call.backend, None)
        with self._cond:
            self._settles -= 1

    def _lose(self, hold: Hold, cause: str = metrics.EXPIRED) -> None:
        with self._cond:
            if not hold.watched:  # released meanwhile: not a loss
                return
            hold.watched = False
        owner = hold.owner()  # called outside the lock: it sends lock_lost
        if owner is not None:
            owner.hold_lost(hold.secret, cause)
