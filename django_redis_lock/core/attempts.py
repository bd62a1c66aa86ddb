"""The acquire attempts of a Lock, as flows: queued on one server, or retried on a quorum.

On one server (or a Sentinel or cluster primary) a waiter queues in Redis with its first
attempt and is handed the lock by the release (:func:`queued_attempts`). A quorum's primaries
keep no queue: a waiter is woken by a release on any of them and tries again after a short
random pause (:func:`quorum_attempts`). The backend says which: its ``queues``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from django_redis_lock.backends.base import Backend, Late, LockKeys
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.steps import Call, Flow, Listen, Wait
from django_redis_lock.exceptions import LateGrant
from django_redis_lock.runtime.tickets import Grant, Nudge

#: The longest a waiter waits for a grant before it looks again (milliseconds).
MAX_WAIT_SLICE_MS = 10_000
# How long a queued waiter's place outlives the slice it waits for, to cover its wake-up.
_QUEUE_GRACE_MS = 2000
# A waiter woken by a release tries again after a random pause up to this long, so that
# waiters of several processes woken together rarely split the primaries' votes.
WAKE_JITTER_SECONDS = 0.005
# After an attempt in which no one got a majority (a split vote), a random pause up to this.
SPLIT_RETRY_SECONDS = 0.05
# How long a waiter's note on a primary outlives the holder's lease it waits on (ms).
_WATCH_GRACE_MS = 2000


class Attempt(NamedTuple):
    """What an acquire's attempts go by."""

    keys: LockKeys
    #: The acquire script's first arguments: secret, lease ms, owner, label.
    args: list[Any]
    #: Where grants for this process arrive ("": not waiting, so no channel).
    channel: str
    #: Whether to wait, and for how long at most (None: no limit).
    wait: bool
    limit: float | None
    #: Hears every busy answer: (lease left ms, first of this acquire, ms the holder has held it).
    busy: Callable[[int, bool, int], None]
    #: Whether a grant must be acknowledged by replicas (REDIS_LOCK["WAIT_REPLICAS"]).
    confirm: bool = False
    #: "1": count the first busy answer in the lock's statistics.
    record: str = ""
    #: The acquire script's last arguments: a semaphore's or read/write lock's kind and limit.
    extra: tuple[Any, ...] = ()


#: An acquire's attempts: the hold taken, or None.
Attempts = Callable[[Attempt], Flow["Acquired | None"]]


def attempts_for(backend: Backend) -> Attempts:
    """The attempts of a Lock on ``backend``: queued where waiters queue, else retried."""
    return queued_attempts if backend.queues else quorum_attempts


class Acquired(NamedTuple):
    """A hold just taken: its fencing token, and whether a release handed it over (then its
    lease is the short hand-over lease until its process lengthens it)."""

    token: int
    handed_over: bool
    #: The secret of the hold when it is not the acquire's own (a quorum attempt's).
    secret: str | None = None


def queued_attempts(attempt: Attempt) -> Flow[Acquired | None]:
    """Try to acquire, and while waiting is allowed, queue and wait for the hand-over.

    A waiter queues in Redis with its first attempt
    and is woken by the release that hands it the lock. Without a grant it tries again after
    the wait the script gave it: the first waiter when the holder's lease ends (the holder may
    have died), the others after a longer slice. The last attempt, at the deadline, also
    leaves the queue.

    With ``attempt.confirm`` every grant is acknowledged by replicas
    before it is taken: an attempt's directly, a hand-over's by a check that its hold stands
    (a failover may have lost it: the attempts go on).
    """
    keys, args, channel, wait, limit, busy, confirm, record, extra = attempt
    deadline = None if limit is None else time.monotonic() + limit
    listening = False
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        wait_ms = 0
        if wait and (left is None or left > 0):
            wait_ms = (
                MAX_WAIT_SLICE_MS
                if left is None
                else min(MAX_WAIT_SLICE_MS, math.ceil(left * 1000))
            )
        sent = time.monotonic()
        counted = "" if listening else record
        # A grant too few replicas acknowledged raises LockNotReplicated: the caller gives it
        # back. A busy answer granted nothing, and needs no acknowledgement.
        result = yield Call(
            keys.script("acquire"),
            keys.all,
            [*args, wait_ms, channel, _QUEUE_GRACE_MS, counted, *extra],
            acked=True,
        )
        if not isinstance(result, list):  # the fencing token: acquired
            took = time.monotonic() - sent
            if took * 1000 < args[1]:
                return Acquired(int(result), handed_over=False)
            # The lease may have ended before the reply came: give the grant back now, and
            # try again while there is time to wait.
            yield Call(keys.script("leave"), keys.all, [args[0], lock_settings.tombstone_ms])
            if not wait_ms:
                raise LateGrant(
                    f"Redis granted the lock, but its reply took {took:.2f} s, as long as the "
                    f"lease ({args[1] / 1000:g} s): the grant was given back, not trusted."
                )
            continue
        lease_left, script_wait = int(result[0]), int(result[1])
        busy(lease_left, not listening, int(result[2]) if len(result) > 2 else -1)
        if not wait_ms:  # not queued: not blocking, or the deadline passed
            return None
        if not listening:
            listening = True
            yield Listen(args[0], channel)
        # Wait for the grant until the script's wait ends (the lease, for the first waiter); a
        # nudge (this waiter is first now) moves that end without a request.
        look_again = time.monotonic() + script_wait / 1000 + 0.001
        while True:
            now = time.monotonic()
            pause = look_again - now if deadline is None else min(look_again, deadline) - now
            message = yield Wait(max(0.0, pause))
            if isinstance(message, Grant):
                if not confirm or (
                    yield Call(
                        keys.script("extend"), (keys.lock,), [args[0], 0, "check"], acked=True
                    )
                ):
                    return Acquired(message.token, handed_over=True)
                break  # the grant did not survive a failover: look again
            if not isinstance(message, Nudge):
                break  # time is up, or told to look again
            look_again = min(look_again, time.monotonic() + message.lease_ms / 1000 + 0.001)


def quorum_attempts(attempt: Attempt) -> Flow[Acquired | None]:
    """:func:`queued_attempts` for a quorum: try, and while waiting is allowed, wait for a
    release (or the holder's lease to end), then try again after a random pause.

    Each attempt has a secret of its own (the acquire's, a dot, a number), so that giving
    back a failed attempt's grants, which the watchdog may finish later, never frees a
    later attempt's; the acquire's own secret frees any of them (see QUORUM_LEAVE).
    """
    keys, args, channel, wait, limit, busy, _, record, _ = attempt
    secret, ttl, owner, label = args
    deadline = None if limit is None else time.monotonic() + limit
    listening = False
    tries = 0
    while True:
        tries += 1
        left = None if deadline is None else deadline - time.monotonic()
        watching = wait and (left is None or left > 0)
        attempt_secret = f"{secret}.{tries:x}"
        watch_ms = _WATCH_GRACE_MS if watching else 0
        result = yield Call(
            "acquire",
            keys.all,
            [
                attempt_secret,
                ttl,
                owner,
                label,
                watch_ms,
                channel if wait else "",
                secret,
                "" if listening else record,
            ],
        )
        if isinstance(result, Late):  # given back: try again while there is time to wait
            if not watching:
                raise LateGrant(result.message)
            continue
        if not isinstance(result, list):
            return Acquired(int(result), handed_over=False, secret=attempt_secret)
        lease_left, held = int(result[0]), int(result[1])
        busy(lease_left, not listening, int(result[2]))
        if not watching:
            return None
        if not listening:
            listening = True
            yield Listen(secret)
        # A holder with a majority: until a release wakes us, or its lease ends (it may have
        # died); a split vote: a random pause.
        if held and lease_left >= 0:
            pause = min(lease_left, MAX_WAIT_SLICE_MS) / 1000
        elif held:
            pause = MAX_WAIT_SLICE_MS / 1000
        else:
            pause = random.uniform(0, SPLIT_RETRY_SECONDS)
        message = yield Wait(_until(pause, deadline))
        if message is not None and held:  # woken by a release: a short random pause
            yield Wait(_until(random.uniform(0, WAKE_JITTER_SECONDS), deadline))


def _until(pause: float, deadline: float | None) -> float:
    if deadline is None:
        return pause
    return max(0.0, min(pause, deadline - time.monotonic()))
