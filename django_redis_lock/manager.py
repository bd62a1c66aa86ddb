"""LockManager: make locks, and see or force-release the held ones of one cache alias."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django_redis_lock import errors
from django_redis_lock.backends import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.drivers import redis_errors
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.lock import Lock
from django_redis_lock.quorum import Fan, QuorumBackend, merge_hold
from django_redis_lock.runtime import runtime
from django_redis_lock.stats import LockStats, backed_by_majority
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.validation import (
    MAX_NAME_LENGTH,
    page_cursor,
    shorten,
    validate_cursor,
    validate_name,
    validate_page_size,
    validate_pattern,
    validate_using,
)

logger = logging.getLogger("django_redis_lock")

_UTC = datetime.timezone.utc
# At most this many SCAN calls serve one page, so a search that matches little stays quick
# on a large database; the page then ends early with a cursor to go on from.
_MAX_SCANS_PER_PAGE = 50
# Lists, spelt here: inside LockManager, "list" is a method.
KeyBatch = list["bytes | str"]
InfoList = list["LockInfo"]
NameList = list[str]
HoldList = list[tuple["LockInfo", str]]
Records = list["list[Any] | LockUnavailable"]
Failures = list[LockUnavailable]
StatsList = list[LockStats]
# Keys fetched per pipelined round trip while listing or clearing.
BATCH_SIZE = 500


@dataclass(frozen=True)
class LockPage:
    """A page of held locks, and the cursor of the next page ("": none).

    The cursor is opaque text: hand it back to :meth:`LockManager.page` as it is.
    """

    locks: list[LockInfo]
    next_cursor: str
    #: Of a quorum's locks, the primaries that did not answer (cache alias: error); a lock they
    #: alone hold is not on the page.
    unanswered: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class LockInfo:
    """A held lock as operators see it."""

    name: str
    fencing_token: int
    owner: str
    label: str | None
    acquired_at: datetime.datetime
    #: Seconds of lease left; ``math.inf`` for a lock whose key lost its expiry (PERSIST by
    #: hand, a restore), which only a force release ends.
    ttl: float
    #: Of a quorum lock, the cache aliases of the primaries that hold it (empty otherwise).
    primaries: tuple[str, ...] = ()
    #: Of a quorum lock, the cache aliases of the primaries that did not answer when it was read
    #: (they may hold it too).
    unanswered: tuple[str, ...] = ()


@dataclass(frozen=True)
class Released:
    """A hold that a force release ended."""

    name: str
    #: The hold released, as a listing shows one; None when its data was not a lock's
    #: (written by something else than this library), which a release by name ends too.
    info: LockInfo | None
    #: Whether a waiting client took the lock over at once.
    handed_over: bool


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# Integer text as the scripts write it ("5"), or as others may ("0005", "-5", "+7"); the
# scripts read the same text as the same number.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Lua numbers are doubles: below this, the scripts compare fencing tokens exactly.
_EXACT_TOKENS = 2**53
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)


def _integer(value: object, limit: int | None = None) -> int | None:
    if not isinstance(value, str) or not _INTEGER.fullmatch(value):
        return None
    try:
        number = int(value)
    except ValueError:  # more digits than Python converts
        return None
    return number if limit is None or abs(number) < limit else None


def _moment(micros: int | None) -> datetime.datetime | None:
    """The aware UTC datetime ``micros`` microseconds after the epoch, if there is one."""
    try:
        return None if micros is None else _EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        return None


def _info(name: str, fields: Sequence[object], pttl: int) -> LockInfo | None:
    """The LockInfo of a held lock's fields (token, owner, label, acquired-at), or None when
    they are not what this library writes: a token that is not an integer the scripts compare
    exactly, a time that is not one datetime can show."""
    token, owner, label, acquired_at = fields
    fencing_token = _integer(token, _EXACT_TOKENS)
    moment = _moment(_integer(acquired_at))
    if fencing_token is None or moment is None:
        return None
    return LockInfo(
        name=name,
        fencing_token=fencing_token,
        owner=owner if isinstance(owner, str) else "",
        label=label if isinstance(label, str) and label else None,
        acquired_at=moment,
        ttl=math.inf if pttl == -1 else pttl / 1000,
    )


def _warn_unanswered(unanswered: dict[str, str], members: int) -> None:
    if unanswered:
        logger.warning(
            "%d of %d primaries of the quorum did not answer the listing (%s): a lock held only "
            "on them is not listed.",
            len(unanswered),
            members,
            "; ".join(f"{alias}: {error}" for alias, error in unanswered.items()),
        )


def _warn_skipped(count: int) -> None:
    if count:
        logger.warning(
            "Skipped %d held lock%s whose Redis data this library did not write (a name, hash "
            "tag, fencing token or time it cannot show); `manage.py locks release NAME` frees "
            "one.",
            count,
            "" if count == 1 else "s",
        )


class Listing(Iterator["LockInfo"]):
    """The held locks of a listing, read as they are iterated (see :meth:`LockManager.list`).

    ``unanswered`` maps the cache alias of each primary of a quorum that did not answer so far
    to its error: a lock only they hold is not listed (a majority answered, or the listing
    would have raised LockUnavailable). Always empty for one alias's locks.
    """

    def __init__(self, read: Callable[[Listing], Iterator[LockInfo]]) -> None:
        self.unanswered: dict[str, str] = {}
        self._locks = read(self)

    def __iter__(self) -> Listing:
        return self

    def __next__(self) -> LockInfo:
        return next(self._locks)


class LockManager:
    """The locks of one cache alias; get one with :func:`get_lock_manager`."""

    def __init__(self, backend: LockBackend) -> None:
        self._backend = backend

    @property
    def alias(self) -> str:
        """The cache alias whose Redis holds these locks."""
        return self._backend.alias

    def lock(self, name: str, **options: Any) -> Lock:
        """A Lock named ``name`` (not yet acquired); options as for :func:`lock`."""
        return Lock(name, using=self.alias, **options)

    def list(self, pattern: str = "*") -> Listing:
        """The held locks whose names match the glob ``pattern``, read with SCAN.

        An iterator (a :class:`Listing`): memory stays flat however many locks there are.
        Locks taken or released while it runs may or may not appear, as with SCAN itself. Held
        locks whose data this library did not write are skipped, with one warning that counts
        them.
        """
        match = self._backend.scan_pattern(validate_pattern(pattern))  # errors at the call
        return Listing(lambda listing: self._listed(match))

    def _listed(self, match: str) -> Iterator[LockInfo]:
        skipped = 0
        try:
            for found, unreadable in self._batches(match):
                skipped += unreadable
                yield from found
        finally:
            _warn_skipped(skipped)

    def page(self, pattern: str = "*", cursor: str = "", size: int = 100) -> LockPage:
        """One page of held locks matching ``pattern``, from ``cursor`` on ("": the first).

        Reads only as much of the keyspace as the page needs, so the first page of a million
        locks costs what the first page of ten does. Pages hold about ``size`` locks (SCAN
        gives no exact counts), fewer when a sparse match ends a page early;
        ``next_cursor`` is "" on the last page. Skips what :meth:`list` skips. On a cluster
        the pages go through its primaries one after the other; a cursor of a cluster whose
        slots moved to other primaries since is refused (ValueError: start again).
        """
        match = self._backend.scan_pattern(validate_pattern(pattern))
        first_slot, scan_cursor = validate_cursor(self.check_cursor(cursor))
        size = validate_page_size(size)
        found: InfoList = []
        skipped = 0
        with redis_errors("Could not list locks"), self._refreshing():
            slots, servers = zip(*self._backend.primaries_by_slot(), strict=True)
            if cursor and first_slot not in slots:
                raise ValueError(
                    "This page cursor is of primaries the cluster no longer has (its slots "
                    "moved): list from the first page again."
                )
            server, count = (slots.index(first_slot) if cursor else 0), size
            for _ in range(_MAX_SCANS_PER_PAGE):
                if server >= len(servers):
                    break
                scan_cursor, keys = servers[server].scan(scan_cursor, match=match, count=count)
                count = min(count * 2, 10 * BATCH_SIZE)  # read faster where matches are sparse
                if keys:
                    infos, unreadable = self._fetch_keys(keys)
                    found.extend(infos)
                    skipped += unreadable
                if scan_cursor == 0:
                    server += 1
                if server >= len(servers) or len(found) >= size:
                    break
        _warn_skipped(skipped)
        more = server < len(servers)
        next_cursor = page_cursor(slots[server], int(scan_cursor)) if more else ""
        return LockPage(sorted(found, key=lambda info: info.name), next_cursor)

    def check_cursor(self, cursor: object) -> str:
        """``cursor`` if :meth:`page` can go on from it: "" or a page's ``next_cursor``;
        else TypeError or ValueError."""
        validate_cursor(cursor)
        assert isinstance(cursor, str)
        return cursor

    def _batches(self, match: str) -> Iterator[tuple[InfoList, int]]:
        """The held locks whose keys match the SCAN pattern ``match`` and how many were
        skipped, a SCAN batch at a time (never KEYS)."""
        batch: KeyBatch = []
        with redis_errors("Could not list locks"), self._refreshing():
            for client in self._backend.primaries():
                for key in client.scan_iter(match=match, count=BATCH_SIZE):
                    batch.append(key)
                    if len(batch) == BATCH_SIZE:
                        yield self._fetch_keys(batch)
                        batch = []
        if batch:
            yield self._fetch_keys(batch)

    @contextlib.contextmanager
    def _refreshing(self) -> Iterator[None]:
        """When a server of the listing fails, learn the servers again for the next call."""
        try:
            yield
        except errors.CONNECTION + errors.TIMEOUT:
            self._backend.refresh()
            raise

    def _name_of(self, key: bytes | str) -> str | None:
        """The lock name of a lock key found by SCAN; None when no ``lock()`` reaches that key
        (bytes that are not UTF-8, not a valid lock name, or a hash tag not the name's)."""
        try:
            name = self._backend.name_from_key(key.decode() if isinstance(key, bytes) else key)
            return None if name is None else validate_name(name)
        except ValueError:  # UnicodeDecodeError is one
            return None

    def _fetch_keys(self, keys: Sequence[bytes | str]) -> tuple[InfoList, int]:
        return self._fetch(keys, [self._name_of(key) for key in keys])

    def _fetch(
        self, keys: Sequence[bytes | str], names: Sequence[str | None]
    ) -> tuple[InfoList, int]:
        """The held locks among ``keys`` (named ``names``; None: a key no lock reaches) in one
        round trip, and how many held ones cannot be shown truthfully."""
        with redis_errors("Could not read locks"):  # bytes keys (not UTF-8) go out as they are
            values = self._backend.read(keys)
        found: InfoList = []
        skipped = 0
        for i, name in enumerate(names):
            secret, *fields, pttl = values[6 * i : 6 * i + 6]
            if secret is False:  # a tombstone, a gone key or another type: not held
                continue
            info = None if name is None else _info(name, fields, pttl)
            if info is None:
                skipped += 1
            else:
                found.append(info)
        return found, skipped

    def stats(self, pattern: str = "*") -> StatsList:
        """The statistics of the lock names matching ``pattern`` that have any (see
        ``stats.py``), sorted by name; read with SCAN, a batch of names per round trip."""
        return sorted(self.iter_stats(pattern), key=lambda stats: stats.name)

    def iter_stats(self, pattern: str = "*") -> Iterator[LockStats]:
        """:meth:`stats` as they are read, in no order: memory stays flat however many names
        there are (see ``stats.summarize``, which the admin's statistics page reads them by)."""
        match = self._backend.scan_pattern(validate_pattern(pattern), kind="s")
        return self._stats_read(match)

    def _stats_read(self, match: str) -> Iterator[LockStats]:
        with redis_errors("Could not read lock statistics"), self._refreshing():
            for client in self._backend.primaries():
                batch: KeyBatch = []
                for key in client.scan_iter(match=match, count=BATCH_SIZE):
                    batch.append(key)
                    if len(batch) == BATCH_SIZE:
                        yield from self._read_stats(batch)
                        batch = []
                if batch:
                    yield from self._read_stats(batch)

    def get_stats(self, name: str) -> LockStats | None:
        """The statistics of the lock named exactly ``name``, or None when it has none."""
        key = self._backend.keys_for(validate_name(name)).stats
        with redis_errors("Could not read lock statistics"):
            flat = self._backend.run("stats_read", (key,), ())
        return parse_stats(name, flat)

    def _read_stats(self, keys: KeyBatch) -> StatsList:
        found: StatsList = []
        for key, flat in zip(keys, self._backend.read_stats(keys), strict=True):
            name = self._name_of(key)
            stats = None if name is None else parse_stats(name, flat)  # None: not ours
            if stats is not None:
                found.append(stats)
        return found

    def get(self, name: str) -> LockInfo | None:
        """The held lock named exactly ``name`` (glob characters are literal), or None; None
        also (with a warning) when its data is not what this library writes."""
        found, skipped = self._fetch([self._backend.keys_for(validate_name(name)).lock], [name])
        _warn_skipped(skipped)
        return found[0] if found else None

    def release(self, name: str) -> bool:
        """Force-release ``name`` whoever holds it, waking its waiters; True if it was held."""
        return self.force_release(name) is not None

    def force_release(self, name: str, fencing_token: int | None = None) -> Released | None:
        """Force-release ``name``, waking its waiters; what was released, or None if not held.

        With ``fencing_token``, only that hold is released: a lock taken over meanwhile by
        someone else is left alone (an operator confirmed the release of the other hold).
        Without it, a hold whose data this library did not write is released too.
        """
        keys = self._backend.keys_for(validate_name(name)).all
        args = [lock_settings.tombstone_ms, "" if fencing_token is None else int(fencing_token)]
        with redis_errors(f"Could not release lock {name!r}"):
            held = self._backend.run("force_release", keys, args)
        return _released(name, held) if held else None

    def clear(self, pattern: str = "*", progress: Callable[[int, int], None] | None = None) -> int:
        """Force-release the held locks :meth:`list` shows for ``pattern``; how many.

        Each is released by its fencing token, except holds taken while the clear runs: a
        lock handed to a waiter (or taken anew) meanwhile is left to its new holder. A holder
        whose lock was cleared learns it (LockNotOwned) when it releases. Every batch of keys
        costs two round trips. ``progress(released, handed_over)`` is called after each
        batch; ``handed_over`` counts locks a waiter took at once.
        """
        backend, released, handed_over, skipped = self._backend, 0, 0, 0
        with redis_errors("Could not clear locks"):
            seconds, micros = backend.client.time()
            backend.load("force_release")  # a pipeline cannot load it
        started = _EPOCH + datetime.timedelta(seconds=int(seconds), microseconds=int(micros))
        clock = time.monotonic()
        match = backend.scan_pattern(validate_pattern(pattern))
        for found, unreadable in self._batches(match):
            skipped += unreadable
            # Taken since the start by the server's clock, give or take a second of the
            # client's; a start time later than that (written by hand) is no reason to spare.
            running = datetime.timedelta(seconds=time.monotonic() - clock + 1)
            write = backend.client.pipeline(transaction=False)
            for info in found:
                if not started <= info.acquired_at <= started + running:
                    keys = backend.keys_for(info.name).all
                    args = [lock_settings.tombstone_ms, info.fencing_token]
                    backend.queue(write, "force_release", keys, args)
            with redis_errors("Could not clear locks"):
                results = write.execute()
            released += sum(1 for result in results if result)
            handed_over += sum(1 for result in results if result and result[-1] == 2)
            if progress is not None:
                progress(released, handed_over)
        _warn_skipped(skipped)
        return released


def _released(name: str, held: Sequence[bytes | int | None]) -> Released:
    """The Released of a FORCE_RELEASE reply: token, owner, label, acquired-at, 1 or 2."""
    *fields, how = (_text(value) if isinstance(value, bytes) else value for value in held)
    return Released(name, _info(name, fields, 0), handed_over=how == 2)


class QuorumLockManager(LockManager):
    """The locks of a quorum of cache aliases (see ``quorum.py``): a lock is listed once, with
    the primaries that hold it, when a majority of them do; release and clear act on all.

    Listing reads every primary's lock names first (SCAN), then the holds by batches of names:
    its memory grows with the number of names matched, unlike one alias's listing.
    """

    def __init__(self, backend: QuorumBackend) -> None:
        super().__init__(backend)
        self._quorum = backend

    def lock(self, name: str, **options: Any) -> Lock:
        return Lock(name, using=self._quorum.aliases, **options)

    def list(self, pattern: str = "*") -> Listing:
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
            _warn_skipped(skipped)
            _warn_unanswered(unanswered, len(self._quorum.members))

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
        _warn_skipped(skipped)
        _warn_unanswered(unanswered, len(self._quorum.members))
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
        found, skipped = self._holds([validate_name(name)], {})
        _warn_skipped(skipped)
        return found[0][0] if found else None

    def force_release(self, name: str, fencing_token: int | None = None) -> Released | None:
        """Force-release ``name`` on every primary: the hold a majority has (with
        ``fencing_token``, only if it is that hold); without a token, whatever each primary
        holds for it too (what a failed attempt or a dead holder left on a minority)."""
        found, _ = self._holds([validate_name(name)], {})
        hold = found[0] if found else None
        if fencing_token is not None and (hold is None or hold[0].fencing_token != fencing_token):
            return None
        secret = hold[1] if hold is not None else ""
        self._force(name, secret)
        return None if hold is None else Released(name, hold[0], handed_over=False)

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
        _warn_skipped(skipped)
        return released

    def iter_stats(self, pattern: str = "*") -> Iterator[LockStats]:
        """:meth:`stats`: a quorum's names are read from every primary before one is known."""
        return iter(self.stats(pattern))

    def stats(self, pattern: str = "*") -> StatsList:
        """Each primary records the holds it granted: per name, the statistics a majority of
        the primaries backs (see ``stats.backed_by_majority``: no one primary decides)."""
        per_name: dict[str, list[LockStats]] = {}
        failed: Failures = []
        for member in self._quorum.members:
            try:
                found = LockManager(member).stats(pattern)
            except LockUnavailable as exc:
                failed.append(exc)
                continue
            for stats in found:
                per_name.setdefault(stats.name, []).append(stats)
        answered = len(self._quorum.members) - len(failed)
        if answered < self._quorum.needed:
            raise failed[0]
        backed = []
        for found_on in per_name.values():
            nothing: list[LockStats | None] = [None] * (answered - len(found_on))
            chosen = backed_by_majority([*found_on, *nothing], self._quorum.needed)
            if chosen is not None:
                backed.append(chosen)
        return sorted(backed, key=lambda stats: stats.name)

    def _force(self, name: str, secret: str) -> bool:
        """QUORUM_FORCE on every primary; whether a majority released it."""
        fan = Fan("quorum_force", name, [lock_settings.tombstone_ms, secret])
        with redis_errors(f"Could not release lock {name!r}"):
            replies = self._quorum.fan(fan)
        failed = [i for i, reply in enumerate(replies) if isinstance(reply, Exception)]
        if len(failed) > len(replies) - self._quorum.needed:
            raise self._quorum.failure(name, replies, "the release could not be confirmed")
        args: list[object] = [lock_settings.tombstone_ms, secret]
        self._quorum.settle(failed, name, args, "quorum_force")
        return sum(1 for reply in replies if isinstance(reply, list) and reply) > 0

    def _names(self, pattern: str, unanswered: dict[str, str]) -> NameList:
        """The lock names on any primary matching ``pattern``, sorted (SCAN on each); the
        primaries that did not answer go into ``unanswered``."""
        validate_pattern(pattern)
        names: set[str] = set()
        failed: Failures = []
        for member in self._quorum.members:
            manager = LockManager(member)
            try:
                with redis_errors("Could not list locks"):
                    match = member.scan_pattern(pattern)
                    for key in member.client.scan_iter(match=match, count=BATCH_SIZE):
                        name = manager._name_of(key)
                        if name is not None:
                            names.add(name)
            except LockUnavailable as exc:
                failed.append(exc)
                unanswered.setdefault(member.alias, str(exc.__cause__ or exc))
        if len(failed) > len(self._quorum.members) - self._quorum.needed:
            raise LockUnavailable(
                f"Could not list locks: {len(failed)} of {len(self._quorum.members)} primaries "
                f"failed, and a majority ({self._quorum.needed}) is needed: {failed[0]}"
            ) from failed[0].__cause__
        return sorted(names)

    def _holds(self, names: Sequence[str], unanswered: dict[str, str]) -> tuple[HoldList, int]:
        """The holds a majority has among ``names`` (with their secrets), and how many held
        ones cannot be shown truthfully; the primaries that did not answer go into
        ``unanswered`` (and into each LockInfo)."""
        quorum, records = self._quorum, Records()
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
                info = _info(name, merged[1:5], merged[5])
                if info is None:
                    skipped += 1
                else:
                    primaries = tuple(alias for alias, _ in holding)
                    info = dataclasses.replace(info, primaries=primaries, unanswered=tuple(failing))
                    found.append((info, secret))
        return found, skipped


# Page cursors of a quorum's listing start with this, then the last name of the page before.
_AFTER = "after:"
_MAX_CURSOR = len(_AFTER) + MAX_NAME_LENGTH


def get_lock_manager(using: str | Sequence[str] | None = None) -> LockManager:
    """The LockManager of cache alias ``using`` (None: the REDIS_LOCK CACHE setting); of a list
    of aliases, the manager of their quorum's locks."""
    backend = runtime().backend(validate_using(using))
    if isinstance(backend, QuorumBackend):
        return QuorumLockManager(backend)
    return LockManager(backend)


#: ``lock(name, *, timeout=None, blocking=True, blocking_timeout=None, auto_renew=None,
#: reentrant=False, label=None, using=None)``: a Lock, not yet acquired (see :class:`Lock`).
lock = Lock
