"""How a quorum combines its primaries' replies, per script: the majority, the validity of a
grant, its fencing token, and the grants a failed attempt gives back.

Each script a Lock runs is a plan here: a generator that yields :class:`Fan` requests (run a
script on every primary, or on some) and receives one reply per primary, then returns what one
primary's script would have returned. :class:`~django_redis_lock.backends.quorum.QuorumBackend`
takes the fans to the primaries (``fan``/``afan``) and drives the plans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

from django_redis_lock import scripts
from django_redis_lock.backends.base import Backend, Late
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.scripts import ScriptName
from django_redis_lock.stats import backed_by_majority
from django_redis_lock.stats import parse as parse_stats

# Clock drift allowed for per lease, as the Redis documentation's algorithm does: a part of the
# lease plus a constant (milliseconds).
DRIFT_FACTOR = 0.01
DRIFT_MS = 2
# How far ahead of this process's clock the proposed token is: enough for the primaries'
# clocks to be behind it during the round trip, so that they all grant the proposal.
PROPOSAL_LEAD_US = 100_000

#: The quorum version of each script the Lock runs by name; the others run as they are.
QUORUM_SCRIPTS: dict[ScriptName, ScriptName] = {
    "acquire": "quorum_acquire",
    "release": "quorum_release",
    "leave": "quorum_leave",
    "force_release": "quorum_force",
}
#: Scripts that take all of a lock's keys; the others take the lock key only.
ALL_KEYS_SCRIPTS = frozenset(QUORUM_SCRIPTS.values())


class MemberAway(ConnectionError):
    """A primary skipped by a call: it failed to answer a moment ago."""


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


#: A quorum operation: yields Fans, receives their replies, returns the combined reply.
Plan = Generator[Fan, Any, Any]
#: What a primary not asked by a Fan gets in the replies.
NOT_ASKED: Any = None


class QuorumPlans:
    """The plans of a quorum's scripts; mixed into QuorumBackend, which has the members and
    drives them."""

    members: tuple[LockBackend, ...]
    needed: int
    #: What the process settles a call with whose outcome is unknown (the watchdog's).
    settle_call: Callable[[Backend, Any, list[object], str], None]
    #: The channel on which a member's grants arrive in this process (its listener's).
    channel_of: Callable[[Backend], str]

    def settle(self, indexes: Sequence[int], name: str, args: list[object], script: str) -> None:
        """Have ``script`` run on members that did not answer, until they do (the watchdog)."""
        for i in indexes:
            member = self.members[i]
            self.settle_call(member, member.keys_for(name), args, script)

    def _plan(self, script: ScriptName, name: str, args: Sequence[Any]) -> Plan:
        if script == "acquire":
            return self._acquiring(name, args)
        if script in ("release", "leave"):
            return self._freeing(name, QUORUM_SCRIPTS[script], args)
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
        proposal = time.time_ns() // 1000 + PROPOSAL_LEAD_US
        sent_args: list[Any] = [secret, ttl, owner, label, watch, "", proposal, watcher, counted]
        if channel:  # a waiter: each primary gets the channel of this process on it
            sent_args = [
                [*sent_args[:5], self.channel_of(member), *sent_args[6:]] for member in self.members
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
        replies = yield Fan("extend", name, [*args[:3], "", *args[4:]])
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
            if isinstance(reply, Exception) or reply is NOT_ASKED:
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
