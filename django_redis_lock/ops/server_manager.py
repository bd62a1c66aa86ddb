"""ServerLockManager: the locks of one cache alias (a server, a Sentinel service or a
cluster: its primaries are read with SCAN, a page at a time)."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Iterator, Sequence

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import LockKeys
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.drivers import redis_errors
from django_redis_lock.ops.manager import (
    BATCH_SIZE,
    InfoList,
    LockManager,
    ReleasedList,
    StatsList,
)
from django_redis_lock.ops.records import (
    EPOCH,
    Listing,
    LockInfo,
    LockPage,
    Released,
    SeveralHolders,
    info_of,
    released_of,
    shared_infos,
    warn_skipped,
)
from django_redis_lock.ops.server_rates import RateLimits, queue_resets
from django_redis_lock.stats import LockStats
from django_redis_lock.stats import parse as parse_stats
from django_redis_lock.validation import (
    page_cursor,
    validate_cursor,
    validate_fencing_token,
    validate_name,
    validate_page_size,
    validate_pattern,
)

# At most this many SCAN calls serve one page, so a search that matches little stays quick
# on a large database; the page then ends early with a cursor to go on from.
_MAX_SCANS_PER_PAGE = 50
# Keys found by SCAN, spelt here: inside a manager, "list" is a method.
KeyBatch = list["bytes | str"]


class ServerLockManager(RateLimits, LockManager):
    """The locks of one cache alias: a server, a Sentinel service or a cluster."""

    _backend: LockBackend

    def __init__(self, backend: LockBackend) -> None:
        super().__init__(backend)

    @property
    def using(self) -> str:
        """The cache alias whose Redis holds these locks."""
        return self._backend.alias

    def list(self, pattern: str = "*") -> Listing:
        """The held locks whose names match the glob ``pattern``, read with SCAN.

        An iterator (a :class:`Listing`): memory stays flat however many locks there are.
        Locks taken or released while it runs may or may not appear, as with SCAN itself. Held
        locks whose data this library did not write are skipped, with one warning that counts
        them.
        """
        match = self._scan_pattern(pattern)  # errors at the call
        return Listing(lambda listing: self._listed(match))

    def _scan_pattern(self, pattern: str) -> str:
        """SCAN's MATCH for the keys of held locks named ``pattern``: a lock's, the holders
        of a semaphore or read/write lock, and an active rate limit's state."""
        return self._backend.scan_pattern(validate_pattern(pattern), kind="[lmrg]")

    def _listed(self, match: str) -> Iterator[LockInfo]:
        skipped = 0
        try:
            for found, unreadable in self._batches(match):
                skipped += unreadable
                yield from found
        finally:
            warn_skipped(skipped)

    def page(self, pattern: str = "*", cursor: str = "", size: int = 100) -> LockPage:
        """One page of held locks matching ``pattern``, from ``cursor`` on ("": the first).

        Reads only as much of the keyspace as the page needs, so the first page of a million
        locks costs what the first page of ten does. Pages hold about ``size`` locks (SCAN
        gives no exact counts), fewer when a sparse match ends a page early;
        ``next_cursor`` is "" on the last page. Skips what :meth:`list` skips. On a cluster
        the pages go through its primaries one after the other; a cursor of a cluster whose
        slots moved to other primaries since is refused (ValueError: start again).
        """
        match = self._scan_pattern(pattern)
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
        warn_skipped(skipped)
        more = server < len(servers)
        next_cursor = page_cursor(slots[server], int(scan_cursor)) if more else ""
        found.sort(key=lambda info: (info.name, info.kind, info.fencing_token))
        return LockPage(found, next_cursor)

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

    def name_of(self, key: bytes | str) -> str | None:
        """The lock name of a lock key found by SCAN; None when no ``lock()`` reaches that key
        (bytes that are not UTF-8, not a valid lock name, or a hash tag not the name's)."""
        try:
            name = self._backend.name_from_key(key.decode() if isinstance(key, bytes) else key)
            return None if name is None else validate_name(name)
        except ValueError:  # UnicodeDecodeError is one
            return None

    def _fetch_keys(self, keys: Sequence[bytes | str]) -> tuple[InfoList, int]:
        """The held locks of the keys SCAN found: locks' and semaphores' (and read/write
        locks') holders, and rate limits, each kind read in one round trip."""
        kinds = [self._kind_of(key) for key in keys]
        found: InfoList = []
        skipped = 0
        for fetch, letters in ((self._fetch_shared, "mr"), (self._fetch_rates, "g")):
            batch = [key for key, kind in zip(keys, kinds, strict=True) if kind in letters]
            if batch:
                infos, unreadable = fetch(batch, [self.name_of(key) for key in batch])
                found.extend(infos)
                skipped += unreadable
        locks = [key for key, kind in zip(keys, kinds, strict=True) if kind not in "mrg"]
        infos, unreadable = self._fetch(locks, [self.name_of(key) for key in locks])
        return infos + found, skipped + unreadable

    def _kind_of(self, key: bytes | str) -> str:
        return self._backend.kind_of_key(
            key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        )

    def _fetch_shared(
        self, keys: Sequence[bytes | str], names: Sequence[str | None]
    ) -> tuple[InfoList, int]:
        """The holders of the semaphores and read/write locks of ``keys`` (named ``names``)."""
        with redis_errors("Could not read locks"):
            records = self._backend.read_shared(keys)
        found: InfoList = []
        skipped = 0
        for name, record in zip(names, records, strict=True):
            holders, unreadable = shared_infos(name or "", record)
            if name is None:  # a key no semaphore() reaches (not its tag, not a name): skipped
                skipped += 1 if holders or unreadable else 0
                continue
            found.extend(holders)
            skipped += unreadable
        return found, skipped

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
            info = None if name is None else info_of(name, fields, pttl)
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

    def _read_stats(self, keys: KeyBatch) -> StatsList:
        found: StatsList = []
        for key, flat in zip(keys, self._backend.read_stats(keys), strict=True):
            name = self.name_of(key)
            stats = None if name is None else parse_stats(name, flat)  # None: not ours
            if stats is not None:
                found.append(stats)
        return found

    def get(self, name: str) -> LockInfo | None:
        """The held lock named exactly ``name`` (glob characters are literal), or None; None
        also (with a warning) when its data is not what this library writes."""
        found, skipped = self._fetch([self._backend.keys_for(validate_name(name)).lock], [name])
        warn_skipped(skipped)
        return found[0] if found else None

    def holders(self, name: str) -> InfoList:
        """Every hold of ``name``: its lock's, each holder of its semaphore or read/write
        lock (a name may be both), then its rate limit if active; skips (and warns of) what
        :meth:`list` skips."""
        validate_name(name)
        found = [info for info in [self.get(name)] if info is not None]
        rate = [info for info in [self.get_rate(name)] if info is not None]
        return found + self._shared_holders(name) + rate

    def _shared_holders(self, name: str) -> InfoList:
        """The holders of the semaphore and the read/write lock ``name``, by fencing token."""
        keys = [self._backend.shared_keys_for(name, kind).lock for kind in ("s", "r")]
        holders, skipped = self._fetch_shared(keys, [name, name])
        warn_skipped(skipped)
        return sorted(holders, key=lambda info: info.fencing_token)

    def release_all(self, name: str) -> ReleasedList:
        """Force-release every hold of ``name``: its lock's, and each holder of its semaphore
        or read/write lock, by fencing token (one taken meanwhile stays with its holder); and
        reset its rate limit."""
        released = [each for each in [self._force_lock(name, None)] if each is not None]
        holders = self._shared_holders(name)
        tokens: list[int | None] = [info.fencing_token for info in holders] or [None]
        for token in tokens:  # None: one holder whose data is not readable, if any
            each = self._force_shared(name, token, holders)
            if each is not None:
                released.append(each)
        return released + [each for each in [self.reset_rate(name)] if each is not None]

    def force_release(self, name: str, fencing_token: int | None = None) -> Released | None:
        """Force-release ``name``, waking its waiters; what was released, or None if not held.

        With ``fencing_token``, only that hold is released: a lock taken over meanwhile by
        someone else is left alone (an operator confirmed the release of the other hold).
        Without it, a hold whose data this library did not write is released too; a name
        with several holders (a semaphore's places, readers) raises :class:`SeveralHolders`,
        a ValueError that lists their tokens: pick one, or :meth:`release_all`. A name
        without a hold but with an active rate limit: the rate limit is reset (its Released
        has an info of kind "rate"), as :meth:`reset_rate`.
        """
        fencing_token = validate_fencing_token(fencing_token)
        holders = self._shared_holders(validate_name(name))  # their kinds: replies have none
        if fencing_token is None:
            lock = [info for info in [self.get(name)] if info is not None]
            if len(lock + holders) > 1:  # a lock and a semaphore of one name count too
                raise SeveralHolders(name, [info.fencing_token for info in lock + holders])
        released = self._force_lock(name, fencing_token)
        if released is None:
            released = self._force_shared(name, fencing_token, holders)
        if released is None and fencing_token is None:
            return self.reset_rate(name)
        return released

    def _force_lock(self, name: str, fencing_token: int | None) -> Released | None:
        keys = self._backend.keys_for(validate_name(name))
        with redis_errors(f"Could not release lock {name!r}"):
            held = self._backend.run("force_release", keys.all, _force_args(fencing_token))
        return released_of(name, held) if held else None

    def _force_shared(
        self, name: str, fencing_token: int | None, holders: InfoList
    ) -> Released | None:
        """A semaphore's or read/write lock's holder: the token's (None: the only one; where
        no holder is readable, the one a semaphore or a read/write lock of ``name`` has)."""
        kinds = [info.kind for info in holders if fencing_token in (None, info.fencing_token)]
        for kind in kinds[:1] or ["semaphore", "read"]:
            shared = self._keys_of(name, kind)
            with redis_errors(f"Could not release lock {name!r}"):
                held = self._backend.run(
                    shared.script("force_release"), shared.all, _force_args(fencing_token)
                )
            if held:
                return released_of(name, held, holders)
        return None

    def _keys_of(self, name: str, kind: str) -> LockKeys:
        """The keys of the hold of ``name`` of LockInfo ``kind``: a lock's, a semaphore's, or
        a read/write lock's (a reader's or the writer's)."""
        if kind == "lock":
            return self._backend.keys_for(name)
        return self._backend.shared_keys_for(name, "s" if kind == "semaphore" else "r")

    def clear(self, pattern: str = "*", progress: Callable[[int, int], None] | None = None) -> int:
        """Force-release the held locks :meth:`list` shows for ``pattern``; how many.

        Each is released by its fencing token, except holds taken while the clear runs: a
        lock handed to a waiter (or taken anew) meanwhile is left to its new holder. A holder
        whose lock was cleared learns it (LockNotOwned) when it releases. Matching rate limits
        are reset (counted too). Every batch of keys costs two round trips.
        ``progress(released, handed_over)`` is called after each batch; ``handed_over``
        counts locks a waiter took at once.
        """
        backend, released, handed_over, skipped = self._backend, 0, 0, 0
        with redis_errors("Could not clear locks"):
            seconds, micros = backend.client.time()
            backend.load("force_release")  # a pipeline cannot load it
            backend.load("shared_force_release")
        started = EPOCH + datetime.timedelta(seconds=int(seconds), microseconds=int(micros))
        clock = time.monotonic()
        match = self._scan_pattern(pattern)
        for found, unreadable in self._batches(match):
            skipped += unreadable
            # Taken since the start by the server's clock, give or take a second of the
            # client's; a start time later than that (written by hand) is no reason to spare.
            running = datetime.timedelta(seconds=time.monotonic() - clock + 1)
            write = backend.client.pipeline(transaction=False)
            queue_resets(write, backend, found)
            for info in found:
                if info.kind != "rate" and not started <= info.acquired_at <= started + running:
                    keys = self._keys_of(info.name, info.kind)
                    args = [lock_settings.tombstone_ms, info.fencing_token]
                    backend.queue(write, keys.script("force_release"), keys.all, args)
            with redis_errors("Could not clear locks"):
                results = write.execute()
            released += sum(1 for result in results if result)
            handed_over += sum(1 for each in results if isinstance(each, list) and each[-1:] == [2])
            if progress is not None:
                progress(released, handed_over)
        warn_skipped(skipped)
        return released


def _force_args(fencing_token: int | None) -> list[object]:
    """The force-release scripts' ARGV: the tombstone, and the token ("": whichever hold)."""
    return [lock_settings.tombstone_ms, "" if fencing_token is None else int(fencing_token)]
