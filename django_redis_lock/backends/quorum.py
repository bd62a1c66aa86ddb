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
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from django.core.exceptions import ImproperlyConfigured

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend, LockKeys, demoted
from django_redis_lock.backends.quorum_replies import (
    ALL_KEYS_SCRIPTS,
    NOT_ASKED,
    QUORUM_SCRIPTS,
    Fan,
    MemberAway,
    QuorumPlans,
)
from django_redis_lock.backends.servers import address_of
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.backends.wire import bulk
from django_redis_lock.conf import lock_settings
from django_redis_lock.scripts import ScriptName

# A primary that failed to connect or answer in time is skipped this long (while the others
# can make a majority without it), so that a frozen primary does not cost every call its
# socket timeout.
_AWAY_SECONDS = 1.0


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


class QuorumBackend(QuorumPlans):
    """The backend of a quorum lock: every step runs on each member backend (one per alias),
    and their replies are combined as the Lock expects them from one primary."""

    #: Waiters do not queue on the primaries: a release wakes them, and they try again.
    queues = False

    def __init__(
        self,
        members: Sequence[LockBackend],
        settle_call: Callable[[Backend, Any, list[object], str], None],
        channel_of: Callable[[Backend], str],
    ) -> None:
        self.members = tuple(members)
        self.settle_call, self.channel_of = settle_call, channel_of
        self.aliases = tuple(member.alias for member in self.members)
        self.alias = ", ".join(self.aliases)
        #: How many primaries make a majority.
        self.needed = len(self.members) // 2 + 1
        self.handover_lease_ms = lock_settings.handover_lease_ms
        self.wait_replicas, self.wait_timeout_ms = 0, 0
        self.sentinel = False
        self.namespace = lock_settings.KEY_NAMESPACE
        self.hash_tags = lock_settings.hash_tags
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
            address = address_of(member.client.connection_pool)
            if address in seen:
                raise ImproperlyConfigured(
                    f"The cache aliases {seen[address]!r} and {member.alias!r} of a quorum lock "
                    "reach the same Redis server (or Sentinel service): a quorum needs "
                    "independent primaries, or one failure counts for two (the databases of one "
                    "server fail together)."
                )
            seen[address] = member.alias

    # -- what the Lock and the watchdog call -----------------------------------------------

    def _keys_for(self, name: str) -> LockKeys:  # its name: each member makes its own keys
        return LockKeys(name, name, name, name)

    def shared_keys_for(self, name: str, kind: str = "s") -> LockKeys:
        raise ImproperlyConfigured(
            f"Semaphores and read/write locks cannot be quorum locks (cache {self.alias!r}): "
            "give them one primary (Sentinel and WAIT_REPLICAS where a failover must not lose "
            "a grant): semaphore(..., using=<alias>)."
        )

    def rate_keys_for(self, name: str) -> tuple[str, str]:
        raise ImproperlyConfigured(
            f"Rate limits cannot be quorum locks (cache {self.alias!r}): a rate kept on each of "
            "several primaries admits more than the rate whenever they disagree. Give them one "
            "primary (Sentinel and WAIT_REPLICAS where a failover must not forget calls): "
            "rate_limit(..., using=<alias>)."
        )

    @property
    def listable(self) -> bool:
        return all(member.listable for member in self.members)

    def one_script(self, keys: Sequence[LockKeys]) -> bool:
        """Each step runs on every primary, with one lock's keys."""
        return False

    def parts(self, keys: LockKeys, script: ScriptName) -> list[tuple[Backend, LockKeys, str]]:
        quorum_script = QUORUM_SCRIPTS.get(script, script)
        return [(member, member.keys_for(keys.lock), quorum_script) for member in self.members]

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """The script's plan, its fans run with blocking calls (every plan fans out first)."""
        plan = self._plan(script, str(keys[0]), args)
        fan = next(plan)
        while True:
            try:
                fan = plan.send(self.fan(fan))
            except StopIteration as done:
                return done.value

    async def arun(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run`, its fans awaited."""
        plan = self._plan(script, str(keys[0]), args)
        fan = next(plan)
        while True:
            try:
                fan = plan.send(await self.afan(fan))
            except StopIteration as done:
                return done.value

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

    def listens_on(self) -> Sequence[Backend]:
        """Its grants arrive on each member's channel."""
        return self.members

    def servers(self) -> list[tuple[str, Any]]:
        return [server for member in self.members for server in member.servers()]

    # -- running a script on every member ----------------------------------------------------

    def member_args(self, fan: Fan, index: int) -> Sequence[Any]:
        return fan.args[index] if fan.per_member else fan.args

    def member_keys(self, member: LockBackend, script: ScriptName, name: str) -> Sequence[str]:
        keys = member.keys_for(name)
        if script in ALL_KEYS_SCRIPTS:
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
        replies: list[Any] = [NOT_ASKED] * len(self.members)
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
        except errors.RESPONSE as exc:  # Redis 6.2's READONLY, inside the script's error
            if not demoted(exc):
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
        replies: list[Any] = [NOT_ASKED] * len(self.members)
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
