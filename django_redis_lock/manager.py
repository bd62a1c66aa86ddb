"""LockManager: make locks, and see or force-release the held ones of one cache alias."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from django_redis_lock.backends import LockBackend, get_backend
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.lock import Lock, tombstone_ms, validate_name

_UTC = datetime.timezone.utc
# A batch of keys from SCAN (spelt here: inside LockManager, "list" is a method).
KeyBatch = list[str]
# Keys fetched per pipelined round trip while listing or clearing.
BATCH_SIZE = 500
# The hash fields of a held lock, in the order LockInfo is built from.
_FIELDS = ("s", "t", "o", "l", "a")


@dataclass(frozen=True)
class LockInfo:
    """A held lock as operators see it."""

    name: str
    fencing_token: int
    owner: str
    label: str | None
    acquired_at: datetime.datetime
    ttl: float


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _info(name: str, fields: list[Any], pttl: int) -> LockInfo | None:
    """The LockInfo of a lock hash, or None for a tombstone or a lease that just ended."""
    secret, token, owner, label, acquired_at = fields
    if secret is None or pttl < 0:
        return None
    return LockInfo(
        name=name,
        fencing_token=int(token),
        owner=_text(owner or b""),
        label=_text(label) or None if label is not None else None,
        acquired_at=datetime.datetime.fromtimestamp(int(acquired_at) / 1e6, tz=_UTC),
        ttl=pttl / 1000,
    )


def _validate_pattern(pattern: object) -> str:
    if not isinstance(pattern, str):
        raise TypeError(f"A lock name pattern must be a str, not {type(pattern).__name__}.")
    if not pattern:
        raise ValueError("A lock name pattern must not be empty; '*' matches every lock.")
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

    def _scan(self, pattern: str) -> Iterator[Sequence[str]]:
        """The lock keys whose names match ``pattern``, in batches, with SCAN (never KEYS)."""
        match = self._backend.scan_pattern(_validate_pattern(pattern))
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

    def _fetch(self, keys: Sequence[str]) -> Iterator[LockInfo]:
        pipe = self._backend.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, _FIELDS)
            pipe.pttl(key)
        try:
            replies = pipe.execute()
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not read locks: {exc}") from exc
        for i, key in enumerate(keys):
            info = _info(self._backend.name_from_key(key), replies[2 * i], replies[2 * i + 1])
            if info is not None:
                yield info

    def get(self, name: str) -> LockInfo | None:
        """The held lock named exactly ``name`` (glob characters are literal), or None."""
        key = self._backend.keys(validate_name(name)).lock
        pipe = self._backend.client.pipeline(transaction=False)
        pipe.hmget(key, _FIELDS)
        pipe.pttl(key)
        try:
            fields, pttl = pipe.execute()
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not read lock {name!r}: {exc}") from exc
        return _info(name, fields, pttl)

    def release(self, name: str) -> bool:
        """Force-release ``name`` whoever holds it, waking its waiters; True if it was held."""
        keys = self._backend.keys(validate_name(name)).as_list()
        try:
            return bool(self._backend.scripts.force_release(keys=keys, args=[tombstone_ms()]))
        except redis.RedisError as exc:
            raise LockUnavailable(f"Could not release lock {name!r}: {exc}") from exc

    def clear(self, pattern: str = "*") -> int:
        """Force-release every held lock whose name matches ``pattern``; how many were held.

        Each lock is released as held when it was read, so a waiter that a release hands it
        to keeps it; every batch of keys costs two pipelined round trips.
        """
        backend, released = self._backend, 0
        for keys in self._scan(pattern):
            try:
                read = backend.client.pipeline(transaction=False)
                for key in keys:
                    read.hget(key, "s")
                holders = read.execute()
                write = backend.client.pipeline(transaction=False)
                for key, secret in zip(keys, holders, strict=True):
                    if secret is not None:
                        lock_keys = backend.keys(backend.name_from_key(key)).as_list()
                        args = [secret, tombstone_ms()]
                        backend.scripts.release(keys=lock_keys, args=args, client=write)
                released += sum(write.execute())
            except redis.RedisError as exc:
                raise LockUnavailable(f"Could not clear locks: {exc}") from exc
        return released


def get_lock_manager(using: str | None = None) -> LockManager:
    """The LockManager of cache alias ``using`` (None: the REDIS_LOCK CACHE setting)."""
    if using is not None and not isinstance(using, str):
        raise TypeError(f"using must be a cache alias (str) or None, not {type(using).__name__}.")
    return LockManager(get_backend(using))


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
    return get_lock_manager(using).lock(
        name,
        timeout=timeout,
        blocking=blocking,
        blocking_timeout=blocking_timeout,
        auto_renew=auto_renew,
        reentrant=reentrant,
        label=label,
    )
