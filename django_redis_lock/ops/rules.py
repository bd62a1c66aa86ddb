"""The safety rules of a deployment, each written once: the system checks (``checks/``) say
what they say at startup, and ``manage.py locks doctor`` (``doctor.py``) what they say now.

A rule takes plain facts (a setting, what a server said of itself) and returns a
:class:`Verdict`: its level, the system check id it is reported under, what was found and
what to change. Neither caller words a rule's finding itself, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from django_redis_lock.backends.servers import WAIT_MARGIN

OK, WARNING, ERROR = "ok", "warning", "error"


@dataclass(frozen=True)
class Verdict:
    """What a rule says of the facts it was given."""

    #: ``ok``, ``warning`` or ``error`` (as of now: the system checks report any but ``ok``
    #: as a Warning, since at startup a server may not have its replicas back yet).
    level: str
    #: The system check id it is reported under ("" when ``ok``).
    id: str
    #: What was found, as a sentence.
    message: str
    #: What to change ("" when nothing).
    fix: str = ""


def replicas(alias: str, needed: int, connected: int | None, *, sentinel: bool) -> Verdict | None:
    """WAIT_REPLICAS (``needed``) against the replicas the primary of cache ``alias`` has
    connected (None: unknown, it did not answer). None when nothing can be said.

    W006: no WAIT_REPLICAS where a failover can promote a replica (Sentinel, or any primary
    with replicas: whatever promotes one, it may lack the latest grants); W005: more than the
    primary has connected (every acquire fails); W011: fewer (a partition can leave that many
    with the old primary, which then goes on granting)."""
    if not needed:
        if not sentinel and not connected:
            return Verdict(OK, "", "no replicas, and no WAIT_REPLICAS")
        has = "uses Sentinel" if sentinel else f"has {connected} connected replica(s)"
        return Verdict(
            WARNING,
            "django_redis_lock.W006",
            f"The cache {alias!r} {has}, and REDIS_LOCK['WAIT_REPLICAS'] is 0: a grant the "
            "primary has not passed on to a replica is lost by a failover, and two clients "
            "may then hold the same lock.",
            f"Set REDIS_LOCK['WAIT_REPLICAS'] to {connected or 'the number of replicas'} (see "
            "Partitions in the README).",
        )
    if connected is None:
        return None
    if connected < needed:
        return Verdict(
            ERROR,
            "django_redis_lock.W005",
            f"REDIS_LOCK['WAIT_REPLICAS'] is {needed}, but the primary of cache {alias!r} has "
            f"{connected} connected replica(s): every acquire will fail with LockNotReplicated "
            "until enough replicas are connected.",
            f"Connect {needed - connected} more replica(s), or lower WAIT_REPLICAS.",
        )
    if connected > needed:
        return Verdict(
            WARNING,
            "django_redis_lock.W011",
            f"REDIS_LOCK['WAIT_REPLICAS'] is {needed}, and the primary of cache {alias!r} has "
            f"{connected} connected replicas: a network partition that leaves {needed} of them "
            "on the primary's side lets it go on granting locks that the replica Sentinel "
            "promotes on the other side grants again (two holders).",
            f"Set REDIS_LOCK['WAIT_REPLICAS'] to {connected}, the number of replicas: then no "
            "partition lets two primaries grant, at the price of no grants while a replica is "
            "down (see Partitions in the README).",
        )
    return Verdict(
        OK,
        "",
        f"every one of the {connected} replicas acknowledges each grant: no partition lets "
        "two primaries grant one lock",
    )


def listing(alias: str, *, listable: bool) -> Verdict:
    """W002: the KEY_FUNCTION of cache ``alias`` hides key text, so no lock can be listed."""
    if listable:
        return Verdict(OK, "", "held locks can be listed")
    return Verdict(
        WARNING,
        "django_redis_lock.W002",
        f"The KEY_FUNCTION of cache {alias!r} does not keep key text, so held locks cannot be "
        "listed (manage.py locks, the admin).",
        "Give locks a cache alias that uses the default KEY_FUNCTION.",
    )


def no_socket_timeout(alias: str) -> Verdict:
    """W003: cache ``alias`` sets no socket timeout."""
    return Verdict(
        WARNING,
        "django_redis_lock.W003",
        f"The cache {alias!r} sets no socket timeout: with redis-py before 8 (or "
        "socket_timeout=None) a Redis that stops answering makes lock calls, and the "
        "watchdog renewing held locks, wait forever; redis-py 8 gives up after 5 s.",
        'Set OPTIONS "SOCKET_TIMEOUT" (django-redis, django-valkey) or "socket_timeout" '
        "(Django's RedisCache) to what your locks can afford, for example 1 to 5 seconds.",
    )


def socket_timeouts(
    alias: str, timeouts: Collection[float | None], needed: int, wait_timeout_ms: int
) -> Verdict:
    """The socket timeouts of the connections of cache ``alias`` (None: one has none): W003
    when one has none, else :func:`wait_timeout`'s W012, else ok."""
    known = [timeout for timeout in timeouts if timeout is not None]
    if not known or len(known) < len(timeouts):
        return no_socket_timeout(alias)
    too_short = wait_timeout(alias, known, needed, wait_timeout_ms)
    return too_short or Verdict(OK, "", f"socket timeout {min(known):g} s")


def wait_timeout(
    alias: str, timeouts: Collection[float | None], needed: int, wait_timeout_ms: int
) -> Verdict | None:
    """W012: with WAIT_REPLICAS (``needed``), a socket timeout of cache ``alias`` that does
    not outlast WAIT_TIMEOUT by WAIT_MARGIN: a WAIT that takes its time (a failover, a slow
    replica) times the call out. None when none is too short."""
    wait = wait_timeout_ms / 1000
    short = [t for t in timeouts if t is not None and t < wait + WAIT_MARGIN]
    if not needed or not short:
        return None
    return Verdict(
        WARNING,
        "django_redis_lock.W012",
        f"The cache {alias!r} has a socket timeout of {min(short):g} s, and "
        f"REDIS_LOCK['WAIT_TIMEOUT'] is {wait:g} s: a grant whose replicas take that long to "
        "acknowledge (a failover, a slow replica) times out the call, which then fails with "
        "LockUnavailable instead of being acknowledged.",
        f"Set the socket timeout to at least {wait + WAIT_MARGIN:g} s (WAIT_TIMEOUT plus "
        f"{WAIT_MARGIN:g} s), or lower WAIT_TIMEOUT.",
    )


#: How waiters on a cluster are woken, as the doctor says it.
SHARDED_WAKE_UPS = "sharded pub/sub (SSUBSCRIBE on the node of each lock's slot)"
CLASSIC_WAKE_UPS = "classic PUBLISH (the cluster bus carries each grant to every node)"


def wake_ups(setting: str, without_spublish: Collection[str]) -> Verdict:
    """How the waiters of a cluster cache are woken, and why: REDIS_LOCK["CLUSTER_WAKE_UPS"]
    (``setting``, as the locks read it) and the primaries that have no SPUBLISH. Either way
    is ok: classic wake-ups cost the cluster bus more, and lose nothing."""
    if setting == "classic":
        return Verdict(OK, "", f"{CLASSIC_WAKE_UPS}: REDIS_LOCK['CLUSTER_WAKE_UPS'] is \"classic\"")
    if without_spublish:
        lacking = ", ".join(sorted(without_spublish))
        return Verdict(OK, "", f"{CLASSIC_WAKE_UPS}: no SPUBLISH on {lacking} (Redis before 7)")
    return Verdict(OK, "", f"{SHARDED_WAKE_UPS}: every primary has SPUBLISH")
