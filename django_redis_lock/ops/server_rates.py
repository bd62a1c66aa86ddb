"""The rate limits of one cache alias as operators see them: listed beside the held locks (their
"g" keys turn up in the same SCAN), read by name, and reset.

A reset deletes the rate limit's state: its next calls are admitted as after a quiet spell (up
to its burst at once), and callers already sleeping until a turn they took still make their
call then. Its statistics stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_redis_lock.backends.single import LockBackend
from django_redis_lock.core.drivers import redis_errors
from django_redis_lock.ops.records import LockInfo, Released, rate_info, warn_skipped
from django_redis_lock.validation import validate_name

# Lists, spelt here, as the managers spell them.
InfoList = list["LockInfo"]


class RateLimits:
    """The rate limits of a ServerLockManager, mixed into it."""

    _backend: LockBackend

    def get_rate(self, name: str) -> LockInfo | None:
        """The active rate limit named exactly ``name`` (kind "rate"), or None; None also (with
        a warning) when its state is not what the rate scripts write (:meth:`reset_rate` still
        empties it)."""
        key = self._backend.rate_keys_for(validate_name(name))[0]
        found, skipped = self._fetch_rates([key], [name])
        warn_skipped(skipped)
        return found[0] if found else None

    def reset_rate(self, name: str) -> Released | None:
        """Empty the rate limit ``name`` (delete its state): what it was (``info`` None: not
        readable), or None when it had none (idle: nothing to reset)."""
        info = self.get_rate(name)
        with redis_errors(f"Could not reset rate limit {name!r}"):
            deleted = self._backend.client.delete(self._backend.rate_keys_for(name)[0])
        return Released(name, info, handed_over=False) if deleted else None

    def _fetch_rates(
        self, keys: Sequence[bytes | str], names: Sequence[str | None]
    ) -> tuple[InfoList, int]:
        """The active rate limits of ``keys`` (named ``names``; None: a key no
        ``rate_limit()`` reaches) in one round trip, and how many cannot be shown truthfully
        (their state is not what the rate scripts write)."""
        with redis_errors("Could not read rate limits"):
            states = self._backend.read_rates(keys)
        found: InfoList = []
        skipped = 0
        for name, state in zip(names, states, strict=True):
            if state is None:  # gone, drained, or not a hash
                continue
            info = None if name is None else rate_info(name, state)
            if info is None:
                skipped += 1
            else:
                found.append(info)
        return found, skipped


def queue_resets(write: Any, backend: LockBackend, infos: Sequence[LockInfo]) -> None:
    """Queue on the pipeline ``write`` the reset of each rate limit among ``infos``."""
    for info in infos:
        if info.kind == "rate":
            write.delete(backend.rate_keys_for(info.name)[0])
