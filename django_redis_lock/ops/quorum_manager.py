"""QuorumLockManager: the locks of a quorum of cache aliases (see ``backends/quorum.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django_redis_lock.backends.quorum import QuorumBackend
from django_redis_lock.backends.quorum_replies import Fan, merge_hold
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.drivers import redis_errors
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.ops.manager import (
    BATCH_SIZE,
    InfoList,
    LockManager,
    ReleasedList,
    StatsList,
)
from django_redis_lock.ops.records import (
    Listing,
    LockInfo,
    LockPage,
    Released,
    info_of,
    warn_skipped,
    warn_unanswered,
)
from django_redis_lock.ops.server_manager import ServerLockManager
from django_redis_lock.stats import LockStats, backed_by_majority
from django_redis_lock.validation import (
    MAX_NAME_LENGTH,
    shorten,
    validate_fencing_token,
    validate_name,
    validate_page_size,
    validate_pattern,
)

# Page cursors of a quorum's listing start with this, then the last name of the page before.
_AFTER = "after:"
_MAX_CURSOR = len(_AFTER) + MAX_NAME_LENGTH
# Lists, spelt here: inside a manager, "list" is a method.
NameList = list[str]
HoldList = list[tuple["LockInfo", str]]
Records = list["list[Any] | LockUnavailable"]
Failures = list[LockUnavailable]


class QuorumLockManager(LockManager):
    """The locks of a quorum of cache aliases (see ``quorum.py``): a lock is listed once, with
    the primaries that hold it, when a majority of them do; release and clear act on all.

    Listing reads every primary's lock names first (SCAN), then the holds by batches of names:
    its memory grows with the number of names matched, unlike one alias's listing.
    """

    _backend: QuorumBackend

    def __init__(self, backend: QuorumBackend) -> None:
        super().__init__(backend)

    @property
    def using(self) -> tuple[str, ...]:
        """The cache aliases of the quorum's primaries."""
        return self._backend.aliases

    def list(self, pattern: str = "*") -> Listing:
        """The held locks a majority of the primaries has, by name order; the primaries that
        did not answer are in the listing's ``unanswered``."""
        validate_pattern(pattern)
        return Listing(lambda listing: self._listed_on_a_majority(pattern, listing.unanswered))

    def _listed_on_a_majority(self, pattern: str, unanswered: dict[str, str]) -> Iterator[LockInfo]:
        skipped = 0
        try:
            names = self._names(pattern, unanswered)
            for at in range(0, len(names), BATCH_SIZE):
                found, unreadable = self._holds(names[at : at + BATCH_SIZE], unanswered)
                skipped += unreadable
                yield from (info for info, _ in found)
        finally:
            warn_skipped(skipped)
            warn_unanswered(unanswered, len(self._backend.members))

    def page(self, pattern: str = "*", cursor: str = "", size: int = 100) -> LockPage:
        """A page of held locks by name order; the cursor is the last name of the page before
        ("": the first page)."""
        validate_pattern(pattern)
        after = self.check_cursor(cursor)[len(_AFTER) :]
        size = validate_page_size(size)
        unanswered: dict[str, str] = {}
        names = [name for name in self._names(pattern, unanswered) if not cursor or name > after]
        found: InfoList = []
        skipped, at = 0, 0
        while at < len(names) and len(found) < size:
            batch, unreadable = self._holds(names[at : at + size], unanswered)
            found.extend(info for info, _ in batch)
            skipped += unreadable
            at += size
        warn_skipped(skipped)
        warn_unanswered(unanswered, len(self._backend.members))
        more = at < len(names)
        return LockPage(found, _AFTER + names[at - 1] if more else "", unanswered)

    def check_cursor(self, cursor: object) -> str:
        """A quorum's cursor: "", or "after:" and the last name of the page before."""
        if not isinstance(cursor, str):
            raise TypeError(f"A page cursor is a str, not {type(cursor).__name__}.")
        if cursor and not (cursor.startswith(_AFTER) and len(cursor) <= _MAX_CURSOR):
            raise ValueError(f"Not a page cursor of a quorum's locks: {shorten(repr(cursor), 80)}.")
        return cursor

    def get(self, name: str) -> LockInfo | None:
        """The hold a majority of the primaries has of ``name``, or None."""
        found, skipped = self._holds([validate_name(name)], {})
        warn_skipped(skipped)
        return found[0][0] if found else None

    def holders(self, name: str) -> InfoList:
        """The hold of ``name`` (a quorum has no semaphores nor read/write locks)."""
        return [info for info in [self.get(name)] if info is not None]

    def get_rate(self, name: str) -> LockInfo | None:
        """None: a quorum has no rate limits (``rate_limit()`` refuses one)."""
        validate_name(name)
        return None

    def reset_rate(self, name: str) -> Released | None:
        """None: a quorum has no rate limits."""
        validate_name(name)
        return None

    def force_release(self, name: str, fencing_token: int | None = None) -> Released | None:
        """Force-release ``name`` on every primary: the hold a majority has (with
        ``fencing_token``, only if it is that hold); without a token, whatever each primary
        holds for it too (what a failed attempt or a dead holder left on a minority)."""
        fencing_token = validate_fencing_token(fencing_token)
        found, _ = self._holds([validate_name(name)], {})
        hold = found[0] if found else None
        if fencing_token is not None and (hold is None or hold[0].fencing_token != fencing_token):
            return None
        secret = hold[1] if hold is not None else ""
        self._force(name, secret)
        return None if hold is None else Released(name, hold[0], handed_over=False)

    def release_all(self, name: str) -> ReleasedList:
        """:meth:`force_release` of ``name``, whoever holds it: a quorum has one hold a name."""
        return [each for each in [self.force_release(name)] if each is not None]

    def clear(self, pattern: str = "*", progress: Callable[[int, int], None] | None = None) -> int:
        """Force-release the held locks :meth:`list` shows, each by the secret of the hold
        listed: a lock taken anew while the clear runs is left to its new holder."""
        released, skipped = 0, 0
        unanswered: dict[str, str] = {}
        names = self._names(pattern, unanswered)
        for at in range(0, len(names), BATCH_SIZE):
            found, unreadable = self._holds(names[at : at + BATCH_SIZE], unanswered)
            skipped += unreadable
            for info, secret in found:
                if self._force(info.name, secret):
                    released += 1
            if progress is not None:
                progress(released, 0)
        warn_skipped(skipped)
        return released

    def iter_stats(self, pattern: str = "*") -> Iterator[LockStats]:
        """:meth:`stats`: a quorum's names are read from every primary before one is known."""
        return iter(self.stats(pattern))

    def stats(self, pattern: str = "*") -> StatsList:
        """Each primary records the holds it granted: per name, the statistics a majority of
        the primaries backs (see ``stats.backed_by_majority``: no one primary decides)."""
        per_name: dict[str, list[LockStats]] = {}
        failed: Failures = []
        for member in self._backend.members:
            try:
                found = ServerLockManager(member).stats(pattern)
            except LockUnavailable as exc:
                failed.append(exc)
                continue
            for stats in found:
                per_name.setdefault(stats.name, []).append(stats)
        answered = len(self._backend.members) - len(failed)
        if answered < self._backend.needed:
            raise failed[0]
        backed = []
        for found_on in per_name.values():
            nothing: list[LockStats | None] = [None] * (answered - len(found_on))
            chosen = backed_by_majority([*found_on, *nothing], self._backend.needed)
            if chosen is not None:
                backed.append(chosen)
        return sorted(backed, key=lambda stats: stats.name)

    def _force(self, name: str, secret: str) -> bool:
        """QUORUM_FORCE on every primary; whether a majority released it."""
        fan = Fan("quorum_force", name, [lock_settings.tombstone_ms, secret])
        with redis_errors(f"Could not release lock {name!r}"):
            replies = self._backend.fan(fan)
        failed = [i for i, reply in enumerate(replies) if isinstance(reply, Exception)]
        if len(failed) > len(replies) - self._backend.needed:
            raise self._backend.failure(name, replies, "the release could not be confirmed")
        args: list[object] = [lock_settings.tombstone_ms, secret]
        self._backend.settle(failed, name, args, "quorum_force")
        return sum(1 for reply in replies if isinstance(reply, list) and reply) > 0

    def _names(self, pattern: str, unanswered: dict[str, str]) -> NameList:
        """The lock names on any primary matching ``pattern``, sorted (SCAN on each); the
        primaries that did not answer go into ``unanswered``."""
        validate_pattern(pattern)
        names: set[str] = set()
        failed: Failures = []
        for member in self._backend.members:
            manager = ServerLockManager(member)
            try:
                with redis_errors("Could not list locks"):
                    match = member.scan_pattern(pattern)
                    for key in member.client.scan_iter(match=match, count=BATCH_SIZE):
                        name = manager.name_of(key)
                        if name is not None:
                            names.add(name)
            except LockUnavailable as exc:
                failed.append(exc)
                unanswered.setdefault(member.alias, str(exc.__cause__ or exc))
        if len(failed) > len(self._backend.members) - self._backend.needed:
            raise LockUnavailable(
                f"Could not list locks: {len(failed)} of {len(self._backend.members)} primaries "
                f"failed, and a majority ({self._backend.needed}) is needed: {failed[0]}"
            ) from failed[0].__cause__
        return sorted(names)

    def _holds(self, names: Sequence[str], unanswered: dict[str, str]) -> tuple[HoldList, int]:
        """The holds a majority has among ``names`` (with their secrets), and how many held
        ones cannot be shown truthfully; the primaries that did not answer go into
        ``unanswered`` (and into each LockInfo)."""
        quorum, records = self._backend, Records()
        failing: list[str] = []
        for member in quorum.members:
            try:
                with redis_errors("Could not read locks"):
                    records.append(member.read([member.keys_for(name).lock for name in names]))
            except LockUnavailable as exc:
                records.append(exc)
                failing.append(member.alias)
                unanswered.setdefault(member.alias, str(exc.__cause__ or exc))
        failed = [record for record in records if isinstance(record, Exception)]
        if len(failed) > len(quorum.members) - quorum.needed:
            raise failed[0]
        found: HoldList = []
        skipped = 0
        for i, name in enumerate(names):
            by_secret: dict[str, Any] = {}
            for member, record in zip(quorum.members, records, strict=True):
                if isinstance(record, Exception):
                    continue
                values = record[6 * i : 6 * i + 6]
                if values[0] and isinstance(values[0], str):
                    by_secret.setdefault(values[0], []).append((member.alias, values))
            for secret, holding in by_secret.items():
                if len(holding) < quorum.needed:
                    continue
                merged = merge_hold(secret, [values for _, values in holding], quorum.needed)
                info = info_of(name, merged[1:5], merged[5])
                if info is None:
                    skipped += 1
                else:
                    primaries = tuple(alias for alias, _ in holding)
                    info = dataclasses.replace(info, primaries=primaries, unanswered=tuple(failing))
                    found.append((info, secret))
        return found, skipped
