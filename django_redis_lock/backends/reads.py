"""The reads of listings: what operators see of many locks, semaphores, rate limits and their
statistics, each kind in one round trip (a cluster's: one per key, pipelined, ``cluster.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_redis_lock import scripts
from django_redis_lock.backends.base import flat_lists, listed
from django_redis_lock.scripts import ScriptName


class ListingReads:
    """The listing reads of a one-server backend, made of its :meth:`run`."""

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover  (the backend's own)

    def read(self, keys: Sequence[str | bytes]) -> list[Any]:
        """READ of ``keys`` (lock keys, any number) in one round trip: six values per key."""
        return scripts.decode_read(self.run("read", keys, ()))

    def read_shared(self, keys: Sequence[str | bytes]) -> list[Any]:
        """The holders of semaphores and read/write locks (holders keys, any number) in one
        round trip: per key, its limit and a record per live holder (see SHARED_READ_MANY)."""
        found: list[Any] = scripts.decode_read(self.run("shared_read_many", keys, ()))
        return found

    def read_rates(self, keys: Sequence[str | bytes]) -> list[Any]:
        """The state of rate limits (their keys, any number) in one round trip: per key, None
        or [next, rate, burst, interval, now] as stored (see RATE_READ_MANY)."""
        return listed(scripts.decode_read(self.run("rate_read_many", keys, ())))

    def read_stats(self, keys: Sequence[str | bytes]) -> list[list[Any]]:
        """The statistics hashes of ``keys`` (any number) in one round trip: a flat list of
        fields and values per key (empty: none there)."""
        return flat_lists(scripts.decode_read(self.run("stats_read_many", keys, ())))
