"""The Lua scripts that make every lock operation a single atomic round trip.

Every lock has four keys sharing one Redis Cluster hash tag (see ``backends.base.LockKeys``):

``lock``     a hash. While held: ``s`` secret of the holder's acquisition, ``t`` fencing token,
             ``o`` owner, ``l`` label, ``a`` acquired-at (server clock, microseconds; a grant of
             a free lock leaves it out when it equals the token, as it does unless tokens ran
             ahead of the clock: the reads take ``t`` then, 16 bytes less per held lock); its
             PTTL is the lease.
             Once released only ``t`` stays, as a short-lived tombstone that keeps the
             fencing token increasing, with ``r``, the secret of the last hold its
             holder released (so that a retried release is recognised), and ``f``, the secret
             of the last hold an operator released (so that its holder's release or renewal,
             which finds it gone, is not counted as a lost hold).
``queue``    a sorted set of waiting secrets, scored by arrival time (microseconds): FIFO order.
``waiters``  a hash: waiting secret -> JSON ``{t: ttl ms, d: deadline ms, w: looks again at
             ms, o, l, c: channel}`` (times by the server clock). A quorum lock's waiters do
             not queue: there it maps an acquire's secret to its channel.
``stats``    a hash: the lock's hold and wait statistics (``scripts/stats.py``, ``stats.py``).

Release hands the lock straight to the first live waiter and PUBLISHes the grant on that
waiter's process channel as ``secret:token:acquired_at``, so the next holder needs no round
trip of its own. On a Redis 7+ cluster the channel is the waiter's process's for that lock, in
the lock's slot, and marked with a leading NUL byte: the grant goes out with SPUBLISH, to the
lock's shard only (``runtime/shards.py``).
The first waiter is the one that watches for a holder that died: it looks
again when the lease ends. The others look again every ``NEXT_WAITER_SLICE_MS`` (four fifths
of the hand-over lease), so the waiter that becomes first after a hand-over looks at the new
lease in time anyway; only when it would not (a lease shorter than that) is it sent
``secret:lease_ms`` to look again when the lease ends. Sparing that message spares waking a
third process at the moment the new holder's process needs the CPU.

The hand-over lease is at most ``HANDOVER_LEASE_MS`` (REDIS_LOCK["HANDOVER_LEASE"], built into
the scripts of each backend): the new holder's watchdog lengthens it
to the full TTL at a third of it, as it renews any lease (a short hold is released before that
and costs no extra request), so a waiter that died while queued holds up the others for
seconds, not for a whole TTL. Waiter entries carry a server-side deadline: a
waiter that died or gave up is skipped, and the queue keys expire on their own.

Fencing tokens are ``max(last token + 1, server clock in microseconds)``: strictly increasing
while the tombstone lives, and past it as long as the Redis server's clock does not go back.

The scripts live by kind: ``queue.py`` (a lock on one server: its queue of waiters),
``quorum.py`` (a lock on each primary of a quorum), ``many.py`` (several locks' names at
once, on one server), ``shared.py`` (semaphores and read/write
locks: several holders, each with its own lease), ``rate.py`` (rate limits: a cell rate
algorithm on the server's clock), ``stats.py`` (recording and reading the
statistics). Each is headed by its KEYS and ARGV. They stay Python strings, as redis-py keeps
its own: the helpers they share are put together in Python.
"""

from __future__ import annotations

import json
from typing import Any

from django_redis_lock.scripts.many import MANY_ACQUIRE, MANY_EXTEND, MANY_RELEASE
from django_redis_lock.scripts.queue import (
    ACQUIRE,
    EXTEND,
    FORCE_RELEASE,
    LEAVE,
    READ,
    RELEASE,
    with_lease,
)
from django_redis_lock.scripts.quorum import (
    QUORUM_ACQUIRE,
    QUORUM_FORCE,
    QUORUM_LEAVE,
    QUORUM_MAX_LEAD_US,
    QUORUM_RAISE,
    QUORUM_RELEASE,
)
from django_redis_lock.scripts.rate import RATE_ACQUIRE, RATE_READ_MANY
from django_redis_lock.scripts.shared import (
    SHARED_ACQUIRE,
    SHARED_EXTEND,
    SHARED_FORCE,
    SHARED_LEAVE,
    SHARED_READ,
    SHARED_READ_MANY,
    SHARED_RELEASE,
)
from django_redis_lock.scripts.stats import (
    BOUNDS_MS,
    FIRST_STATS_TTL_MS,
    STATS_COUNT,
    STATS_READ,
    STATS_READ_MANY,
    STATS_TTL_MS,
)

#: The name of one of the lock's Lua scripts (a key of :data:`SOURCES`).
ScriptName = str

__all__ = [
    "BOUNDS_MS",
    "FIRST_STATS_TTL_MS",
    "QUORUM_MAX_LEAD_US",
    "SOURCES",
    "STATS_TTL_MS",
    "ScriptName",
    "decode_read",
    "with_lease",
]


def decode_read(raw: bytes | str) -> list[Any]:
    """READ's reply as a list, six values per key (bytes that are not UTF-8 replaced)."""
    values: list[Any] = json.loads(
        raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    )
    return values


#: The scripts by name, with the hand-over lease still to be built in (see with_lease).
SOURCES = {
    "acquire": ACQUIRE,
    "release": RELEASE,
    "leave": LEAVE,
    "force_release": FORCE_RELEASE,
    "extend": EXTEND,
    "read": READ,
    "quorum_acquire": QUORUM_ACQUIRE,
    "quorum_raise": QUORUM_RAISE,
    "quorum_release": QUORUM_RELEASE,
    "quorum_leave": QUORUM_LEAVE,
    "quorum_force": QUORUM_FORCE,
    "stats_count": STATS_COUNT,
    "stats_read": STATS_READ,
    "stats_read_many": STATS_READ_MANY,
    # A semaphore's or a read/write lock's: the names of a lock's, after "shared_".
    "shared_acquire": SHARED_ACQUIRE,
    "shared_release": SHARED_RELEASE,
    "shared_leave": SHARED_LEAVE,
    "shared_force_release": SHARED_FORCE,
    "shared_extend": SHARED_EXTEND,
    "shared_read": SHARED_READ,
    "shared_read_many": SHARED_READ_MANY,
    # A multi-name lock's on one server (see many.py).
    "many_acquire": MANY_ACQUIRE,
    "many_release": MANY_RELEASE,
    "many_extend": MANY_EXTEND,
    # A rate limit's (see rate.py).
    "rate_acquire": RATE_ACQUIRE,
    "rate_read_many": RATE_READ_MANY,
}
