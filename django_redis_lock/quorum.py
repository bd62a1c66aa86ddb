"""Quorum locks (Redlock) over independent Redis primaries: ``using=["a", "b", "c"]``.

A quorum lock is held when a majority of the primaries granted it to the same secret within its
validity (the lease minus the time the grants took minus an allowance for clock drift). The Lock
does not know: its flows yield the same steps, and :class:`QuorumBackend` runs each step on
every primary at once and combines the replies. The calls go out together (sync: each request
is sent on its primary's connection before any reply is read; async: gathered), so a step costs
about one round trip of the slowest primary, not their sum.

Fencing tokens: each primary grants ``max(last + 1, its clock in microseconds, the proposal)``,
where the caller proposes one token (its clock plus a lead) so that the grants of a majority
agree. When they do not, the granted primaries whose token is below the largest are raised to
it before the acquire returns: a majority then has at least that token, every later majority
overlaps it, and so every later token is larger.

A quorum lock never queues on a primary (no FIFO across primaries): a waiter notes its
process's channel on each primary, a release wakes it, and it tries again after a short random
pause, so that waiters woken together rarely split the votes; when they do split, every one
gives its grants back and tries again after a longer random pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import threading
import time
import weakref
from collections.abc import Callable, Generator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from django.core.exceptions import ImproperlyConfigured

from django_redis_lock import errors, scripts
from django_redis_lock.backends import LockBackend, LockKeys, demoted
from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LateGrant, LockUnavailable
from django_redis_lock.stats import backed_by_majority
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.steps import Call, Flow, Listen, ScriptName, Wait
from django_redis_lock.waiting import MAX_WAIT_SLICE_MS, Acquired, Listener, Ticket
from django_redis_lock.watchdog import Leave

# Clock drift allowed for per lease, as the Redis documentation's algorithm does: a part of the
# lease plus a constant (milliseconds).
DRIFT_FACTOR = 0.01
DRIFT_MS = 2
# How far ahead of this process's clock the proposed token is: enough for the primaries'
# clocks to be behind it during the round trip, so that they all grant the proposal.
_PROPOSAL_LEAD_US = 100_000
# A primary that failed to connect or answer in time is skipped this long (while the others
# can make a majority without it), so that a frozen primary does not cost every call its
# socket timeout.
_AWAY_SECONDS = 1.0
# A waiter woken by a release tries again after a random pause up to this long, so that
# waiters of several processes woken together rarely split the primaries' votes.
WAKE_JITTER_SECONDS = 0.005
# After an attempt in which no one got a majority (a split vote), a random pause up to this.
SPLIT_RETRY_SECONDS = 0.05
# How long a waiter's note on a primary outlives the holder's lease it waits on (ms).
_WATCH_GRACE_MS = 2000

# The quorum version of each script the Lock runs by name; the others run as they are.
_SCRIPTS: dict[ScriptName, ScriptName] = {
    "acquire": "quorum_acquire",
    "release": "quorum_release",
    "leave": "quorum_leave",
    "force_release": "quorum_force",
}
# Scripts that take all of a lock's keys; the others take the lock key only.
_ALL_KEYS = frozenset(_SCRIPTS.values())


class MemberAway(ConnectionError):
    """A primary skipped by a call: it failed to answer a moment ago (see _AWAY_SECONDS)."""


def drift_ms(ttl_ms: int) -> int:
    """The clock drift allowed for in a lease of ``ttl_ms``."""
    return int(ttl_ms * DRIFT_FACTOR) + DRIFT_MS


class Fan(NamedTuple):
    """Run a script on the primaries ``only`` (None: all), with ``args`` (a list of one list
    per primary, or one list for all); one reply or exception per primary comes back."""

    script: ScriptName
    name: str
    args: Sequence[Any]
    per_member: bool = False
    only: Sequence[int] | None = None


class Late(NamedTuple):
    """An attempt's answer when a majority granted the lock too late to trust (then gave it
    back): the acquire tries again while it may wait, else raises LateGrant(message)."""

    message: str


#: A quorum operation: yields Fans, receives their replies, returns the combined reply.
Plan = Generator[Fan, Any, Any]
# What a primary not asked by a Fan gets in the replies.
_NOT_ASKED: Any = None


class _Sent(NamedTuple):
    """A request :meth:`QuorumBackend._fan` sent to a member, whose reply is to be read."""

    member: int
    connection: Any
    command: bytes
    lua: Any
    keys: Sequence[str]
    args: Sequence[Any]
    #: Whether the connection was connected before the request (it may have died idle).
    reused: bool


def _send(connection: Any, command: bytes, reused: bool) -> None:
    """Send a packed request, connecting first unless the connection is connected already:
    ``connect()`` itself, as a Sentinel-managed connection finds the primary there (redis-py 8
    connects a connection that sends unconnected without asking its pool where to)."""
    if not reused:
        connection.connect()
    connection.send_packed_command([command])


def _resendable(error: Exception, reused: bool) -> bool:
    """Whether a request that failed with the connection error ``error`` can be sent once more
    on a new connection: it went out on a connection made before (which may have died while
    idle: the server restarted since), or a demoted primary refused it (READONLY)."""
    return reused or demoted(error)


def _address(backend: LockBackend) -> tuple[str, ...]:
    """Which server a member's keys live on: its address (or Sentinel service). Not its
    database: the databases of one server fail together."""
    pool = backend.client.connection_pool
    service = getattr(pool, "service_name", None)
    kwargs = pool.connection_kwargs
    if service is not None:  # a service is named by its sentinels too
        manager = getattr(pool, "sentinel_manager", None)
        sentinels = sorted(
            "{}:{}".format(*_host_port(sentinel.connection_pool.connection_kwargs))
            for sentinel in getattr(manager, "sentinels", ())
        )
        return ("sentinel", str(service), *sentinels)
    if kwargs.get("path"):
        return ("unix", str(kwargs["path"]))
    return ("tcp", *_host_port(kwargs))


def _host_port(kwargs: dict[str, Any]) -> tuple[str, str]:
    """A connection's host (resolved where it can be) and port."""
    host = str(kwargs.get("host", "localhost"))
    with contextlib.suppress(OSError):  # not resolvable now: compared as written
        host = socket.gethostbyname(host)
    return host, str(kwargs.get("port", 6379))


def bulk(parts: Sequence[Any], encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``parts`` as the Redis protocol sends the elements of a command (bulk strings), as the
    client's own packer makes them from the short arguments of a lock's scripts, in a fraction
    of its time: a quorum packs each step once per primary, and its arguments once for all."""
    out = []
    for part in parts:
        if isinstance(part, str):
            data = part.encode(encoding, errors)
        elif isinstance(part, bytes):
            data = part
        elif isinstance(part, int) and not isinstance(part, bool):
            data = b"%d" % part
        elif isinstance(part, float):
            data = repr(part).encode()
        else:
            raise TypeError(f"Cannot send {type(part).__name__} to Redis: {part!r}")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class QuorumBackend(LockBackend):
    """The backend of a quorum lock: every step runs on each member backend (one per alias),
    and their replies are combined as the Lock expects them from one primary."""

    quorum = True

    def __init__(self, members: Sequence[LockBackend]) -> None:  # no super(): no one client
        self.members = tuple(members)
        self.aliases = tuple(member.alias for member in self.members)
        self.alias = ", ".join(self.aliases)
        #: How many primaries make a majority.
        self.needed = len(self.members) // 2 + 1
        self.handover_lease_ms = lock_settings.handover_lease_ms
        self.wait_replicas, self.wait_timeout_ms = 0, 0
        self.sentinel = False
        self.namespace = lock_settings.KEY_NAMESPACE
        self.keys_for = lru_cache(maxsize=4096)(self._keys_for)
        self._head = lru_cache(maxsize=4096)(self._evalsha)
        self._away = [0.0] * len(self.members)
        self._own = threading.local()  # see _connections
        self._made: weakref.WeakSet[Any] = weakref.WeakSet()
        self._refuse_shared()

    def __repr__(self) -> str:
        return f"<QuorumBackend {self.alias}>"

    def _refuse_shared(self) -> None:
        seen: dict[tuple[str, ...], str] = {}
        for member in self.members:
            address = _address(member)
            if address in seen:
                raise ImproperlyConfigured(
                    f"The cache aliases {seen[address]!r} and {member.alias!r} of a quorum lock "
                    "reach the same Redis server (or Sentinel service): a quorum needs "
                    "independent primaries, or one failure counts for two (the databases of one "
                    "server fail together)."
                )
            seen[address] = member.alias

    # -- what the Lock and the watchdog call -----------------------------------------------

    def _keys_for(self, name: str) -> LockKeys:
        """The lock's "keys" here are its name: each member makes its own keys from it."""
        return LockKeys(name, name, name, name)

    @property
    def listable(self) -> bool:
        return all(member.listable for member in self.members)

    def parts(
        self, keys: LockKeys, script: ScriptName
    ) -> list[tuple[LockBackend, LockKeys, ScriptName]]:
        quorum_script = _SCRIPTS.get(script, script)
        return [(member, member.keys_for(keys.lock), quorum_script) for member in self.members]

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        plan, reply = self._plan(script, str(keys[0]), args), None
        while True:
            try:
                fan = plan.send(reply)
            except StopIteration as done:
                return done.value
            reply = self.fan(fan)

    async def arun(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        plan, reply = self._plan(script, str(keys[0]), args), None
        while True:
            try:
                fan = plan.send(reply)
            except StopIteration as done:
                return done.value
            reply = await self.afan(fan)

    run_acked = run
    arun_acked = arun

    def check_async(self) -> None:
        for member in self.members:
            member.check_async()

    def close(self) -> None:
        """Hang up the threads' own connections (the members are the runtime's own backends:
        it closes them)."""
        for connection in list(self._made):
            with contextlib.suppress(Exception):
                connection.disconnect()

    def primaries_by_slot(self) -> list[tuple[int, Any]]:
        raise ImproperlyConfigured("A quorum's locks are listed by its QuorumLockManager.")

    def pubsub_connection(self, read_timeout: float) -> Any:
        raise ImproperlyConfigured("A quorum listens on each of its primaries.")

    def servers(self) -> list[tuple[str, Any]]:
        return [server for member in self.members for server in member.servers()]

    # -- running a script on every member ----------------------------------------------------

    def member_args(self, fan: Fan, index: int) -> Sequence[Any]:
        return fan.args[index] if fan.per_member else fan.args

    def member_keys(self, member: LockBackend, script: ScriptName, name: str) -> Sequence[str]:
        keys = member.keys_for(name)
        if script in _ALL_KEYS:
            return keys.all
        if script == "extend":
            return (keys.lock, keys.stats)
        if script == "stats_count":
            return (keys.stats, keys.lock)
        return (keys.stats,) if script.startswith("stats_") else (keys.lock,)

    def _asked(self, fan: Fan, replies: list[Any]) -> list[int]:
        """The members to ask: those of ``fan.only``, or all but the ones away (unless too
        few would be left for a majority); the skipped get MemberAway in ``replies``."""
        if fan.only is not None:
            return list(fan.only)
        now = time.monotonic()
        away = [i for i, until in enumerate(self._away) if until > now]
        if len(self.members) - len(away) < self.needed:
            away = []
        for i in away:
            replies[i] = MemberAway("skipped: it did not answer a moment ago")
        return [i for i in range(len(self.members)) if i not in away]

    def _answered(self, index: int, error: Exception | None) -> None:
        if error is None:
            self._away[index] = 0.0
        elif isinstance(error, errors.CONNECTION + errors.TIMEOUT):
            self._away[index] = time.monotonic() + _AWAY_SECONDS

    def _skipped_needed(self, replies: list[Any]) -> list[int]:
        """The members a call skipped as away, when without them too few answered: a member
        that failed a moment ago may be back while another has failed since."""
        skipped = [i for i, reply in enumerate(replies) if isinstance(reply, MemberAway)]
        answered = sum(1 for reply in replies if not isinstance(reply, Exception))
        return skipped if skipped and answered < self.needed else []

    def fan(self, fan: Fan) -> list[Any]:
        """Run ``fan`` with blocking calls: every request is sent before any reply is read."""
        replies = self._fan(fan)
        skipped = self._skipped_needed(replies)
        if skipped:
            again = self._fan(fan._replace(only=skipped))
            for i in skipped:
                replies[i] = again[i]
        return replies

    async def afan(self, fan: Fan) -> list[Any]:
        """Run ``fan`` on the running event loop: the members' calls are gathered."""
        replies = await self._afan(fan)
        skipped = self._skipped_needed(replies)
        if skipped:
            again = await self._afan(fan._replace(only=skipped))
            for i in skipped:
                replies[i] = again[i]
        return replies

    def _fan(self, fan: Fan) -> list[Any]:
        replies: list[Any] = [_NOT_ASKED] * len(self.members)
        sent: list[_Sent] = []
        connections = self._connections()
        shared: dict[tuple[str, str], bytes] = {}  # the arguments all members get, packed once
        try:
            for i in self._asked(fan, replies):
                member, connection = self.members[i], connections[i]
                keys = self.member_keys(member, fan.script, fan.name)
                args = self.member_args(fan, i)
                lua, encoder = member.script(fan.script), connection.encoder
                code = (encoder.encoding, encoder.encoding_errors)
                # Connected before this step: it may have died while idle (see _resent).
                reused = getattr(connection, "_sock", None) is not None
                try:
                    packed = shared.get(code) if not fan.per_member else None
                    if packed is None:
                        packed = shared[code] = bulk(args, *code)
                    command = (
                        b"*%d\r\n" % (3 + len(keys) + len(args))
                        + self._head(i, fan.script, fan.name, code)
                        + packed
                    )
                    try:
                        _send(connection, command, reused)
                    except errors.CONNECTION as exc:
                        if not _resendable(exc, reused):
                            raise
                        _send(connection, command, reused=False)  # on a new connection
                        reused = False
                except Exception as exc:
                    replies[i] = exc
                    self._answered(i, exc)
                    connection.disconnect()
                    continue
                sent.append(_Sent(i, connection, command, lua, keys, args, reused))
            while sent:
                one = sent[0]
                try:
                    replies[one.member] = self._reply(one)
                    self._answered(one.member, None)
                except errors.RESPONSE as exc:  # the server answered with an error
                    replies[one.member] = exc
                except Exception as exc:
                    one.connection.disconnect()
                    replies[one.member] = exc
                    self._answered(one.member, exc)
                sent.pop(0)
        finally:  # interrupted: connections with a reply still to come are not reused
            for one in sent:
                one.connection.disconnect()
        return replies

    def _reply(self, sent: _Sent) -> Any:
        """The reply to a request sent by :meth:`_fan`: sent again by its source when the
        server lost the script, and on a new connection when the one it went out on had died
        while idle (a primary restarted since this thread's last step: the request never
        reached it, as redis-py's pool also assumes) or reached a demoted primary."""
        connection, lua, keys, args = sent.connection, sent.lua, sent.keys, sent.args
        try:
            try:
                return connection.read_response()
            except errors.NO_SCRIPT:
                connection.send_command("EVAL", lua.source, len(keys), *keys, *args)
                return connection.read_response()
        except errors.CONNECTION as exc:
            if not _resendable(exc, sent.reused):
                raise
        connection.disconnect()
        _send(connection, sent.command, reused=False)
        try:
            return connection.read_response()
        except errors.NO_SCRIPT:
            connection.send_command("EVAL", lua.source, len(keys), *keys, *args)
            return connection.read_response()

    def _evalsha(self, i: int, script: ScriptName, name: str, code: tuple[str, str]) -> bytes:
        """The packed ``EVALSHA <sha> <n> <keys>`` of a script on a member's keys of ``name``
        (cached: ``_head``)."""
        member = self.members[i]
        keys = self.member_keys(member, script, name)
        return bulk(("EVALSHA", member.script(script).sha, len(keys), *keys), *code)

    def _connections(self) -> list[Any]:
        """This thread's connections, one per member, made like the member's pool makes them
        but kept by the thread: a step of a quorum lock takes no connection from a pool and
        gives none back (a third of the client's work per primary on a fast network).

        They connect on first use and again after an error; a thread that ends drops them, a
        forked child makes its own (the parent's sockets are not the child's to use), and
        :meth:`close` hangs up every thread's."""
        own = self._own
        if getattr(own, "pid", None) != os.getpid():
            own.pid = os.getpid()
            own.connections = []
            for member in self.members:
                pool = member.client.connection_pool
                connection = pool.connection_class(**pool.connection_kwargs)
                self._made.add(connection)
                own.connections.append(connection)
        connections: list[Any] = own.connections
        return connections

    async def _afan(self, fan: Fan) -> list[Any]:
        replies: list[Any] = [_NOT_ASKED] * len(self.members)
        asked = self._asked(fan, replies)

        async def one(i: int) -> Any:
            member = self.members[i]
            keys = self.member_keys(member, fan.script, fan.name)
            return await member.arun(fan.script, keys, self.member_args(fan, i))

        outcomes = await asyncio.gather(*(one(i) for i in asked), return_exceptions=True)
        for i, outcome in zip(asked, outcomes, strict=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # a cancellation
            replies[i] = outcome
            if isinstance(outcome, Exception):
                self._answered(i, None if isinstance(outcome, errors.RESPONSE) else outcome)
            else:
                self._answered(i, None)
        return replies

    def settle(self, indexes: Sequence[int], name: str, args: list[object], script: str) -> None:
        """Have the watchdog run ``script`` on members that did not answer, until they do."""
        from django_redis_lock.runtime import runtime

        for i in indexes:
            member = self.members[i]
            runtime().watchdog.settle(Leave(member, member.keys_for(name), args, script))

    # -- the combining of replies, per script ------------------------------------------------

    def _plan(self, script: ScriptName, name: str, args: Sequence[Any]) -> Plan:
        if script == "acquire":
            return self._acquiring(name, args)
        if script in ("release", "leave"):
            return self._freeing(name, _SCRIPTS[script], args)
        if script == "extend":
            return self._extending(name, args)
        if script == "read":
            return self._reading(name)
        if script == "stats_read":
            return self._reading_stats(name)
        raise ValueError(f"A quorum lock has no step {script!r}.")

    def failure(self, name: str, replies: list[Any], what: str) -> LockUnavailable:
        failed = [
            f"{self.members[i].alias}: {reply}"
            for i, reply in enumerate(replies)
            if isinstance(reply, Exception)
        ]
        answered = sum(1 for reply in replies if not isinstance(reply, Exception))
        error = LockUnavailable(
            f"Lock {name!r}: {what}; {answered} of {len(self.members)} primaries answered, "
            f"{self.needed} are needed ({'; '.join(failed)})."
        )
        error.__cause__ = next((r for r in replies if isinstance(r, Exception)), None)
        return error

    def _acquiring(self, name: str, args: Sequence[Any]) -> Plan:
        """One attempt: the grant of a majority within the lease, or its grants given back.

        ``args``: secret of the attempt, ttl ms, owner, label, watch ms, channel ("": none),
        the acquire's secret, count busy ("1"). Returns the fencing token, or [lease left ms,
        1 if another holds a majority else 0, ms the holder has held it (-1: unknown)].
        """
        secret, ttl, owner, label, watch, channel, watcher, counted = args
        from django_redis_lock.runtime import runtime

        proposal = time.time_ns() // 1000 + _PROPOSAL_LEAD_US
        sent_args: list[Any] = [secret, ttl, owner, label, watch, "", proposal, watcher, counted]
        if channel:  # a waiter: each primary gets the channel of this process on it
            sent_args = [
                [*sent_args[:5], runtime().listener(member).channel, *sent_args[6:]]
                for member in self.members
            ]
        sent = time.monotonic()
        replies = yield Fan("quorum_acquire", name, sent_args, per_member=bool(channel))
        granted = {i: reply for i, reply in enumerate(replies) if isinstance(reply, int)}
        if len(granted) >= self.needed:
            token = max(granted.values())
            low = [i for i, granted_token in granted.items() if granted_token < token]
            at_token = len(granted) - len(low)

            def valid_ms() -> float:  # what is left of the grants' validity
                return float(ttl - (time.monotonic() - sent) * 1000 - drift_ms(ttl))

            if at_token < self.needed and valid_ms() > 0:  # raise enough of the others
                raised = yield Fan("quorum_raise", name, [secret, token], only=low)
                at_token += sum(1 for i in low if raised[i] == 1)
            if at_token >= self.needed and valid_ms() > 0:
                return token
            yield from self._giving_back(name, secret, replies)
            if valid_ms() <= 0:  # a value, not an exception: the attempts go on
                took = (time.monotonic() - sent) * 1000
                return Late(
                    f"Lock {name!r}: a majority of the primaries granted it, but only after "
                    f"{took / 1000:.3f} s, no less than its lease ({ttl / 1000:g} s) minus clock "
                    "drift: the grants were given back."
                )
            raise LockUnavailable(
                f"Lock {name!r}: a majority of the primaries granted it, but lost it before "
                "its fencing token was raised on a majority: the grants were given back."
            )
        yield from self._giving_back(name, secret, replies)
        busy = [reply for reply in replies if isinstance(reply, list)]
        if len(granted) + len(busy) < self.needed:
            raise self.failure(name, replies, "no majority of the primaries could be reached")
        # The lease that ends last: -1 (no expiry) is the longest.
        leases = [int(reply[0]) for reply in busy]
        left = max(leases, key=lambda ms: float("inf") if ms == -1 else ms) if busy else 0
        held = max((int(reply[2]) for reply in busy if len(reply) > 2), default=-1)
        return [left, 1 if len(busy) >= self.needed else 0, held]

    def _giving_back(self, name: str, secret: str, replies: list[Any]) -> Generator[Fan, Any, None]:
        """Free the grants of a failed attempt: at once where granted, through the watchdog
        where the outcome is unknown (the call failed; the primary may yet grant it)."""
        args: list[object] = [secret, lock_settings.tombstone_ms]
        granted = [i for i, reply in enumerate(replies) if isinstance(reply, int)]
        unknown = [
            i
            for i, reply in enumerate(replies)
            if isinstance(reply, Exception) and not isinstance(reply, MemberAway)
        ]
        if granted:
            left = yield Fan("quorum_leave", name, args, only=granted)
            unknown += [i for i in granted if isinstance(left[i], Exception)]
        self.settle(unknown, name, args, "quorum_leave")

    def _freeing(self, name: str, script: ScriptName, args: Sequence[Any]) -> Plan:
        """A release (1: released by a majority, 0: not held by one) or a leave (0)."""
        replies = yield Fan(script, name, args)
        failed = [i for i, reply in enumerate(replies) if isinstance(reply, Exception)]
        freed = sum(1 for reply in replies if reply in (1, 2, 3))
        if script == "quorum_release" and freed < self.needed <= freed + len(failed):
            # Unknown: the caller has the whole release run again until the primaries answer.
            raise self.failure(
                name, replies, f"the release could not be confirmed ({freed} freed it)"
            )
        self.settle(failed, name, list(args), script)
        if freed >= self.needed:
            return 1
        if script == "quorum_release" and len(args) > 2 and args[2] == "1":
            yield from self._counting_gone(name, args[0])
        return 0

    def _counting_gone(self, name: str, secret: str) -> Generator[Fan, Any, None]:
        """Count a hold its holder found gone on every primary that answers: no one primary
        can tell a quorum's hold was lost (one that never granted it does not hold it either);
        each counts it as forced where an operator released it, else as lost."""
        yield Fan("stats_count", name, [secret])

    def _reading_stats(self, name: str) -> Plan:
        """The statistics hash (HGETALL's flat array) that a majority backs (see
        ``stats.backed_by_majority``); [] when a majority recorded nothing."""
        replies = yield Fan("stats_read", name, ())
        found = [reply for reply in replies if isinstance(reply, list)]
        if len(found) < self.needed:
            raise self.failure(name, replies, "its statistics could not be read")
        parsed = [(parse_stats(name, flat), flat) for flat in found]
        backed = backed_by_majority([stats for stats, _ in parsed], self.needed)
        return next((flat for stats, flat in parsed if stats is backed), []) if backed else []

    def _extending(self, name: str, args: Sequence[Any]) -> Plan:
        """EXTEND on every primary: the lease a majority confirmed (less the drift), 1 for a
        'check', or 0 when fewer than a majority hold the lock for the secret."""
        # The primaries do not count a hold they find gone: it is counted once, below.
        replies = yield Fan("extend", name, [*args[:3], ""])
        confirmed = sorted((r for r in replies if isinstance(r, int) and r > 0), reverse=True)
        failed = sum(1 for reply in replies if isinstance(reply, Exception))
        if len(confirmed) >= self.needed:
            if args[2] == "check":
                return 1
            lease = confirmed[self.needed - 1]
            return max(1, lease - drift_ms(lease))
        if len(confirmed) + failed >= self.needed:
            raise self.failure(name, replies, "its hold could not be confirmed")
        if args[2] != "check" and len(args) > 3 and args[3] == "1":
            yield from self._counting_gone(name, args[0])
        return 0

    def _reading(self, name: str) -> Plan:
        """READ on every primary, as one primary's READ reply (JSON): the hold a majority has,
        with the lease a majority still gives it, or no holder."""
        replies = yield Fan("read", name, ())
        holds: dict[Any, list[list[Any]]] = {}
        answered = 0
        for reply in replies:
            if isinstance(reply, Exception) or reply is _NOT_ASKED:
                continue
            answered += 1
            values = scripts.decode_read(reply)
            if values[0] and isinstance(values[0], str):
                holds.setdefault(values[0], []).append(values)
        for secret, found in holds.items():
            if len(found) >= self.needed:
                return json.dumps(merge_hold(secret, found, self.needed))
        if answered < self.needed:
            raise self.failure(name, replies, "its state could not be read")
        return json.dumps([False, False, False, False, False, -2])


def _lease_key(pttl: int) -> float:
    return float("inf") if pttl == -1 else pttl


def merge_hold(secret: str, found: list[list[Any]], needed: int) -> list[Any]:
    """One READ record (six values) of a hold that ``found`` primaries (their READ records)
    have: its largest token (the one it was given), the lease a majority still gives it."""
    leases = sorted((int(values[5]) for values in found), key=_lease_key, reverse=True)
    best = max(found, key=lambda values: _token_of(values[1]))
    return [secret, best[1], best[2], best[3], best[4], leases[needed - 1]]


def _token_of(text: object) -> int:
    try:
        return int(str(text))
    except ValueError:
        return -1


class QuorumListener(Listener):
    """The listeners of a quorum's primaries, as one: a waiter's ticket is woken by a release
    on any of them."""

    channel = "quorum"  # each primary's own channel is put in by QuorumBackend

    def __init__(self, backend: LockBackend) -> None:  # no super(): it listens through others
        assert isinstance(backend, QuorumBackend)
        self._members = backend.members

    def _listeners(self) -> list[Listener]:
        from django_redis_lock.runtime import runtime

        return [runtime().listener(member) for member in self._members]

    def register(self, secret: str, ticket: Ticket) -> None:
        for listener in self._listeners():
            listener.register(secret, ticket)

    def unregister(self, secret: str) -> None:
        for listener in self._listeners():
            listener.unregister(secret)

    def start(self) -> None:
        for listener in self._listeners():
            listener.start()

    def stop(self) -> None:
        """The members' listeners are the runtime's own: it stops them."""


def attempts(
    keys: LockKeys,
    args: list[Any],
    channel: str,
    wait: bool,
    limit: float | None,
    busy: Callable[[int, bool, int], None],
    confirm: bool = False,
    record: str = "",
) -> Flow[Acquired | None]:
    """:func:`waiting.attempts` for a quorum: try, and while waiting is allowed, wait for a
    release (or the holder's lease to end), then try again after a random pause.

    Each attempt has a secret of its own (the acquire's, a dot, a number), so that giving
    back a failed attempt's grants, which the watchdog may finish later, never frees a
    later attempt's; the acquire's own secret frees any of them (see QUORUM_LEAVE).
    """
    secret, ttl, owner, label = args
    deadline = None if limit is None else time.monotonic() + limit
    listening = False
    attempt = 0
    while True:
        attempt += 1
        left = None if deadline is None else deadline - time.monotonic()
        watching = wait and (left is None or left > 0)
        attempt_secret = f"{secret}.{attempt:x}"
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


def quorum_backend(aliases: Sequence[str], member: Callable[[str], LockBackend]) -> QuorumBackend:
    """The backend of a quorum of cache aliases (checked), made of ``member(alias)`` each."""
    from django_redis_lock.cluster import ClusterLockBackend

    members = [member(alias) for alias in aliases]
    for backend in members:
        if isinstance(backend, ClusterLockBackend):
            raise ImproperlyConfigured(
                f"The cache {backend.alias!r} is a Redis Cluster: a quorum lock needs "
                "independent primaries, each a cache alias of one Redis server (or Sentinel "
                "service)."
            )
    return QuorumBackend(members)
