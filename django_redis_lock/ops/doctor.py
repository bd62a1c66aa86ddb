"""``manage.py locks doctor``: every safety check of the live deployment, item by item.

The system checks run at startup, when the servers may not be up yet, and look at one thing
each; the doctor asks every server that grants the alias's locks (each primary of a cluster,
each member of a quorum, the primary Sentinel names now) what it is set up to do, and says
for each item whether it is fine (``ok``), risky (``warning``) or broken (``error``), and
what to change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend
from django_redis_lock.backends.cluster import ClusterLockBackend
from django_redis_lock.backends.servers import (
    EVICTION_HINT,
    OLDEST_TESTED,
    SAFE_POLICY,
    ServerFacts,
    eviction_warning,
    probe,
    socket_timeout,
)
from django_redis_lock.conf import lock_settings
from django_redis_lock.ops import rules
from django_redis_lock.ops.rules import ERROR as ERROR  # the levels, for the command too
from django_redis_lock.ops.rules import OK as OK
from django_redis_lock.ops.rules import WARNING as WARNING
from django_redis_lock.runtime import runtime
from django_redis_lock.validation import validate_using

#: The CONFIG parameters read besides INFO, where the server allows CONFIG.
CONFIG = ("appendfsync", "cluster-require-full-coverage")


@dataclass(frozen=True)
class Finding:
    """One item of the doctor's report."""

    #: ``ok``, ``warning`` or ``error``.
    level: str
    #: What was checked: reachable, version, eviction, persistence, replicas, socket-timeout,
    #: full-coverage, wake-ups, listing.
    check: str
    #: The server or cache alias it is about.
    subject: str
    #: What was found.
    message: str
    #: What to change ("" when nothing).
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        """The JSON object ``locks doctor --json`` prints."""
        return {
            "level": self.level,
            "check": self.check,
            "subject": self.subject,
            "message": self.message,
            "fix": self.fix,
        }


def diagnose(using: str | Sequence[str] | None = None) -> list[Finding]:
    """The findings for the locks of cache alias ``using`` (None: REDIS_LOCK CACHE; a list: a
    quorum), asking its servers now."""
    return examine(runtime().backend(validate_using(using)))


def examine(backend: Backend) -> list[Finding]:
    """The findings for the servers of ``backend`` and its settings, in a stable order."""
    members = getattr(backend, "members", None)
    if members is not None:  # a quorum: each member as a server of its own, then the majority
        return [*_quorum(backend, members), *_alias(backend)]
    return [*_servers(backend, quorum=False), *_alias(backend)]


def _quorum(backend: Backend, members: tuple[Backend, ...]) -> Iterator[Finding]:
    facts: list[ServerFacts] = []
    for member in members:
        found = [probe(name, pool, CONFIG) for name, pool in member.servers()]
        facts += found
        yield from _server_findings(member, found, quorum=True)
    down = sum(1 for each in facts if each.error is not None)
    needed = len(members) // 2 + 1
    subject = f"quorum of {len(members)} ({backend.alias})"
    if len(members) - down < needed:
        yield Finding(
            ERROR,
            "majority",
            subject,
            f"only {len(members) - down} of {len(members)} primaries answer; {needed} are needed: "
            "every acquire fails with LockUnavailable",
            "bring the primaries that do not answer back",
        )
    elif down:
        yield Finding(
            WARNING,
            "majority",
            subject,
            f"{down} of {len(members)} primaries do not answer; the others make a majority, "
            f"but {len(members) - down - needed + 1} more down and acquires fail",
            "bring the primaries that do not answer back",
        )
    else:
        yield Finding(OK, "majority", subject, f"all {len(members)} primaries answer")


def _servers(backend: Backend, *, quorum: bool) -> Iterator[Finding]:
    try:
        servers = backend.servers()
    except Exception as exc:  # a cluster whose nodes cannot be listed now
        yield Finding(ERROR, "reachable", f"cache {backend.alias!r}", str(exc))
        return
    facts = [probe(name, pool, CONFIG) for name, pool in servers]
    yield from _server_findings(backend, facts, quorum=quorum)
    if not isinstance(backend, ClusterLockBackend) and facts[0].error is None:
        yield from _replicas(backend, facts[0])


def _server_findings(
    backend: Backend, facts: list[ServerFacts], *, quorum: bool
) -> Iterator[Finding]:
    cluster = isinstance(backend, ClusterLockBackend)
    for each in facts:
        if each.error is not None:
            level = WARNING if quorum else ERROR
            yield Finding(level, "reachable", each.name, f"does not answer: {each.error}")
            continue
        yield Finding(OK, "reachable", each.name, f"answers: {each.product}")
        yield _version(each)
        yield _eviction(each)
        yield _persistence(each, quorum=quorum, replicated=bool(each.connected_replicas))
        if cluster:
            yield _coverage(each)


def _version(facts: ServerFacts) -> Finding:
    if facts.version and facts.version[:2] < OLDEST_TESTED:
        return Finding(
            WARNING,
            "version",
            facts.name,
            f"{facts.product} is older than Redis 6.2, the oldest version tested",
            "upgrade the server to Redis 6.2 or later (or Valkey)",
        )
    return Finding(OK, "version", facts.name, f"{facts.product} is supported")


def _eviction(facts: ServerFacts) -> Finding:
    if facts.evicts():
        return Finding(ERROR, "eviction", facts.name, eviction_warning(facts), EVICTION_HINT)
    why = (
        f"maxmemory-policy {SAFE_POLICY}"
        if facts.maxmemory
        else f"no maxmemory limit (policy {facts.policy or 'unknown'})"
    )
    return Finding(OK, "eviction", facts.name, f"never evicts a held lock: {why}")


def _persistence(facts: ServerFacts, *, quorum: bool, replicated: bool) -> Finding:
    aof = facts.info.get("aof_enabled") == "1"
    fsync = facts.config.get("appendfsync")
    if aof and fsync == "always":
        return Finding(
            OK,
            "persistence",
            facts.name,
            "append-only file synced at every write: a restart keeps every grant",
        )
    state = (
        "no append-only file"
        if not aof
        else f"append-only file synced {fsync}"
        if fsync
        else "append-only file (its appendfsync could not be read: CONFIG is disabled here)"
    )
    if quorum:
        return Finding(
            WARNING,
            "persistence",
            facts.name,
            f"{state}: a primary that crashes and restarts without its last grants may grant a "
            "lock again that a majority including it still holds",
            "keep a crashed primary down for longer than the longest lease before it rejoins, "
            "or run it with appendonly yes and appendfsync always",
        )
    if replicated:
        return Finding(
            WARNING,
            "persistence",
            facts.name,
            f"{state}: a primary that restarts before Sentinel fails it over comes back without "
            "its grants, and its replicas resynchronise to that",
            "run the primary with appendonly yes (appendfsync always), or never restart it "
            "automatically",
        )
    return Finding(
        WARNING,
        "persistence",
        facts.name,
        f"{state}: a restart loses the grants since the last sync, and another caller may take a "
        "lock its holder still works under (the holder learns it at its next renewal)",
        "run the server with appendonly yes and appendfsync always if a restart must keep locks",
    )


def _coverage(facts: ServerFacts) -> Finding:
    value = facts.config.get("cluster-require-full-coverage")
    if value == "no":
        return Finding(
            OK,
            "full-coverage",
            facts.name,
            "cluster-require-full-coverage no: locks on the "
            "other primaries work on while one's slots wait for a replica",
        )
    return Finding(
        WARNING,
        "full-coverage",
        facts.name,
        "cluster-require-full-coverage yes: every node refuses commands while any primary's "
        "slots wait for a replica, so every lock pauses during a failover"
        if value
        else "cluster-require-full-coverage could not be read (CONFIG is disabled here)",
        "set cluster-require-full-coverage no on every node",
    )


def _replicas(backend: Backend, primary: ServerFacts) -> Iterator[Finding]:
    connected = primary.connected_replicas or 0
    verdict = rules.replicas(
        backend.alias, backend.wait_replicas, connected, sentinel=backend.sentinel
    )
    if verdict is not None:  # always, with the replicas counted
        yield _finding(verdict, "replicas", primary.name)


def _finding(verdict: rules.Verdict, check: str, subject: str) -> Finding:
    return Finding(verdict.level, check, subject, verdict.message, verdict.fix)


def _alias(backend: Backend) -> Iterator[Finding]:
    listing = rules.listing(backend.alias, listable=backend.listable)
    if listing.level != OK:  # said only when it is not: the other items say more
        yield _finding(listing, "listing", f"cache {backend.alias!r}")
    yield from _socket_timeouts(backend)
    if isinstance(backend, ClusterLockBackend):
        yield from _wake_ups(backend)


def _wake_ups(backend: ClusterLockBackend) -> Iterator[Finding]:
    """How its waiters are woken, as a process that starts now finds it (nothing when the
    cluster cannot say: the reachable items report that)."""
    setting = lock_settings.wake_ups
    try:
        lacking = [] if setting == "classic" else backend.without_spublish()
    except errors.CLIENT:
        return
    yield _finding(rules.wake_ups(setting, lacking), "wake-ups", f"cache {backend.alias!r}")


def _socket_timeouts(backend: Backend) -> Iterator[Finding]:
    members = getattr(backend, "members", None) or (backend,)
    for member in members:
        timeouts = [socket_timeout(pool) for _, pool in _pools(member)]
        verdict = rules.socket_timeouts(
            member.alias, timeouts, member.wait_replicas, member.wait_timeout_ms
        )
        yield _finding(verdict, "socket-timeout", f"cache {member.alias!r}")


def _pools(backend: Backend) -> list[tuple[str, Any]]:
    try:
        return backend.servers()
    except Exception:  # a cluster away: nothing to read
        return []
