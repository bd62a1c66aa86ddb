"""LockManager: make locks, and see or force-release the held ones of one cache alias."""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from django_redis_lock.backends import LockBackend, get_backend
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.lock import Lock, tombstone_ms, validate_name

logger = logging.getLogger("django_redis_lock")

_UTC = datetime.timezone.utc
# SCAN cursors are unsigned 64-bit numbers.
_MAX_CURSOR = 2**64 - 1
# At most this many SCAN calls serve one page, so a search that matches little stays quick
# on a large database; the page then ends early with a cursor to go on from.
_MAX_SCANS_PER_PAGE = 50
# Lists, spelt here: inside LockManager, "list" is a method.
KeyBatch = list[str]
InfoList = list["LockInfo"]
# Keys fetched per pipelined round trip while listing or clearing.
BATCH_SIZE = 500
# The hash fields of a held lock, in the order LockInfo is built from.
_FIELDS = ("s", "t", "o", "l", "a")


@dataclass(frozen=True)
class LockPage:
    """A page of held locks, and the cursor of the next page (0: none)."""

    locks: list[LockInfo]
    next_cursor: int


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


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _info(name: str, fields: list[Any], pttl: int) -> LockInfo | None:
    """The LockInfo of a lock hash, or None for a tombstone, a gone key or a damaged one."""
    secret, token, owner, label, acquired_at = fields
    if not secret or pttl == -2:
        return None
    try:
        return LockInfo(
            name=name,
            fencing_token=int(token),
            owner=owner or "",
            label=label or None,
            acquired_at=datetime.datetime.fromtimestamp(int(acquired_at) / 1e6, tz=_UTC),
            ttl=math.inf if pttl == -1 else pttl / 1000,
        )
    except (TypeError, ValueError):  # written by something else than this library
        logger.warning("Skipped the lock %r: its Redis hash is not a lock's.", name)
        return None


def validate_pattern(pattern: object) -> str:
    """``pattern`` if it is a usable Redis glob (``*``, ``?``, ``[...]``, ``\\`` escapes)."""
    if not isinstance(pattern, str):
        raise TypeError(f"A lock name pattern must be a str, not {type(pattern).__name__}.")
    if not pattern:
        raise ValueError("A lock name pattern must not be empty; '*' matches every lock.")
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
    if escaped:
        raise ValueError(f"The pattern {pattern!r} ends with a lone backslash.")
    if in_class:
        raise ValueError(f"The pattern {pattern!r} has a '[' without its ']'.")
    return pattern


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
        return Lock(self._backend, name, **options)

    def list(self, pattern: str = "*") -> Iterator[LockInfo]:
        """The held locks whose names match the glob ``pattern``, read with SCAN.

        A generator: memory stays flat however many locks there are. Locks taken or released
        while it runs may or may not appear, as with SCAN itself.
        """
        for keys in self._scan(pattern):
            yield from self._fetch(keys)

    def page(self, pattern: str = "*", cursor: int = 0, size: int = 100) -> LockPage:
        """One page of held locks matching ``pattern``, from SCAN ``cursor`` on.

        Reads only as much of the keyspace as the page needs, so the first page of a million
        locks costs what the first page of ten does. Pages hold about ``size`` locks (SCAN
        gives no exact counts), fewer when a sparse match ends a page early;
        ``next_cursor`` is 0 on the last page.
        """
        match = self._backend.scan_pattern(validate_pattern(pattern))
        if (
            isinstance(cursor, bool)
            or not isinstance(cursor, int)
            or not 0 <= cursor <= _MAX_CURSOR
        ):
            raise ValueError(f"A SCAN cursor is a whole number from 0 to 2**64-1, not {cursor!r}.")
        found: list[LockInfo] = []
        try:
            count = size
            for _ in range(_MAX_SCANS_PER_PAGE):
                cursor, keys = self._backend.client.scan(cursor, match=match, count=count)
                count = min(count * 2, 10 * BATCH_SIZE)  # read faster where matches are sparse
                found.extend(self._fetch([_text(key) for key in keys]) if keys else ())
                if cursor == 0 or len(found) >= size:
                    break
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not list locks: {exc}") from exc
        return LockPage(sorted(found, key=lambda info: info.name), int(cursor))

    def _scan(self, pattern: str) -> Iterator[Sequence[str]]:
        """The lock keys whose names match ``pattern``, in batches, with SCAN (never KEYS)."""
        match = self._backend.scan_pattern(validate_pattern(pattern))
        batch: KeyBatch = []
        try:
            for key in self._backend.client.scan_iter(match=match, count=BATCH_SIZE):
                batch.append(_text(key))
                if len(batch) == BATCH_SIZE:
                    yield batch
                    batch = []
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not list locks: {exc}") from exc
        if batch:
            yield batch

    def _fetch(self, keys: Sequence[str], names: Sequence[str] | None = None) -> InfoList:
        """The held locks among ``keys`` (named ``names``, else from the keys), in one round
        trip."""
        try:
            values = json.loads(_text(self._backend.scripts.read(keys=keys)))
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not read locks: {exc}") from exc
        if names is None:
            names = [self._backend.name_from_key(key) for key in keys]
        found = (
            _info(name, values[6 * i : 6 * i + 5], values[6 * i + 5])
            for i, name in enumerate(names)
        )
        return [info for info in found if info is not None]

    def get(self, name: str) -> LockInfo | None:
        """The held lock named exactly ``name`` (glob characters are literal), or None."""
        found = self._fetch([self._backend.keys_for(validate_name(name)).lock], [name])
        return found[0] if found else None

    def release(self, name: str) -> bool:
        """Force-release ``name`` whoever holds it, waking its waiters; True if it was held."""
        return self.force_release(name) is not None

    def force_release(self, name: str, fencing_token: int | None = None) -> LockInfo | None:
        """Force-release ``name`` and return the hold released, or None if it was not held.

        With ``fencing_token``, only that hold is released: a lock taken over meanwhile by
        someone else is left alone (an operator confirmed the release of the other hold).
        """
        keys = self._backend.keys_for(validate_name(name)).all
        args = [tombstone_ms(), "" if fencing_token is None else int(fencing_token)]
        try:
            held = self._backend.scripts.force_release(keys=keys, args=args)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not release lock {name!r}: {exc}") from exc
        if not held:
            return None
        token, owner, label, acquired_at, _ = (_text(v) if v is not None else None for v in held)
        return _info(name, [True, token, owner, label, acquired_at], 0)

    def clear(self, pattern: str = "*", progress: Callable[[int, int], None] | None = None) -> int:
        """Force-release every held lock whose name matches ``pattern``; how many were held.

        Only holds taken before the clear started are released, each by its own secret: a
        lock handed to a waiter (or taken anew) while it runs is left to its new holder.
        Every batch of keys costs two round trips. ``progress(released, handed_over)`` is
        called after each batch; ``handed_over`` counts locks a waiter took at once.
        """
        backend, released, handed_over = self._backend, 0, 0
        try:
            seconds, micros = backend.client.time()
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not clear locks: {exc}") from exc
        started = int(seconds) * 1_000_000 + int(micros)
        for keys in self._scan(pattern):
            try:
                values = json.loads(_text(backend.scripts.read(keys=keys)))
                write = backend.client.pipeline(transaction=False)
                for i, key in enumerate(keys):
                    secret, acquired_at = values[6 * i], values[6 * i + 4]
                    if secret and str(acquired_at).isdigit() and int(acquired_at) < started:
                        lock_keys = backend.keys_for(backend.name_from_key(key)).all
                        args = [secret, tombstone_ms()]
                        backend.scripts.release(keys=lock_keys, args=args, client=write)
                results = write.execute()
            except redis.RedisError as exc:
                raise LockUnavailable(f"Could not clear locks: {exc}") from exc
            released += sum(1 for result in results if result)
            handed_over += sum(1 for result in results if result == 2)
            if progress is not None:
                progress(released, handed_over)
        return released


def _backend_of(using: str | None) -> LockBackend:
    if using is not None and not isinstance(using, str):
        raise TypeError(f"using must be a cache alias (str) or None, not {type(using).__name__}.")
    return get_backend(using)


def get_lock_manager(using: str | None = None) -> LockManager:
    """The LockManager of cache alias ``using`` (None: the REDIS_LOCK CACHE setting)."""
    return LockManager(_backend_of(using))


def lock(
    name: str,
    *,
    timeout: float | None = None,
    blocking: bool = True,
    blocking_timeout: float | None = None,
    auto_renew: bool | None = None,
    reentrant: bool = False,
    label: str | None = None,
    using: str | None = None,
) -> Lock:
    """A Lock named ``name``, not yet acquired; use it in ``with`` or call ``acquire()``.

    ``timeout`` is the lease in seconds (None: REDIS_LOCK TIMEOUT); ``blocking_timeout`` caps
    the wait (None: no limit); ``auto_renew`` keeps the lease alive while held (None:
    REDIS_LOCK AUTO_RENEW); ``reentrant`` lets the same object acquire again; ``label`` is
    shown to operators; ``using`` picks the cache alias (None: REDIS_LOCK CACHE).
    """
    return Lock(
        _backend_of(using),
        name,
        timeout=timeout,
        blocking=blocking,
        blocking_timeout=blocking_timeout,
        auto_renew=auto_renew,
        reentrant=reentrant,
        label=label,
    )
