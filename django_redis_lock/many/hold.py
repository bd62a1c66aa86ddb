"""The hold of a multi-name lock: one watchdog entry for its names (renewed together, lost
together), the label each name records and the secrets of an attempt."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from typing import Any

from django_redis_lock.backends.base import Backend, LockKeys
from django_redis_lock.conf import lock_settings
from django_redis_lock.runtime.holds import Hold, HoldOwner, Settle
from django_redis_lock.validation import MAX_LABEL_LENGTH, shorten


class ManyHold(Hold):
    """The hold of every name of a :class:`~django_redis_lock.many.multi.MultiLock`: one
    renewal for them all (one script on one server), and a name found gone reported as the
    loss of the set (its ``secret`` is the set's, not a name's)."""

    __slots__ = ("all_keys", "secrets")

    def __init__(
        self,
        owner: weakref.ref[HoldOwner],
        backend: Backend,
        all_keys: tuple[LockKeys, ...],
        secrets: tuple[str, ...],
        ttl_ms: int,
        lease_ms: int,
        *,
        repeat: bool,
        name: str,
        set_secret: str,
    ) -> None:
        super().__init__(
            name, owner, backend, all_keys[0], set_secret, ttl_ms, lease_ms, repeat=repeat
        )
        self.all_keys = all_keys
        self.secrets = secrets

    def renew(self) -> int:
        """Renew every name to at least the TTL; the shortest lease left (0: a name is gone)."""
        return extend_all(self.backend, self.all_keys, self.secrets, self.ttl_ms, "atleast")

    def give_back(self) -> list[Settle]:
        """Release every name once Redis answers (the set could not be renewed in time)."""
        return [
            Settle(self.backend, keys, [secret, lock_settings.tombstone_ms], keys.script("release"))
            for keys, secret in zip(self.all_keys, self.secrets, strict=True)
        ]


def extend_all(
    backend: Backend, all_keys: tuple[LockKeys, ...], secrets: tuple[str, ...], ms: int, mode: str
) -> int:
    """Extend every name's lease from the watchdog's thread (see :func:`extend_calls`)."""
    run = backend.run_acked if backend.wait_replicas else backend.run
    shortest = None
    one_script = backend.one_script(all_keys)
    for script, keys, args in extend_calls(one_script, all_keys, secrets, ms, mode):
        left = int(run(script, keys, args))
        if not left:
            return 0
        shortest = left if shortest is None else min(shortest, left)
    return shortest or 0


def extend_calls(
    one_script: bool,
    all_keys: tuple[LockKeys, ...],
    secrets: tuple[str, ...],
    ms: int,
    mode: str,
) -> list[tuple[str, tuple[str, ...], list[Any]]]:
    """The script calls that extend every name by ``ms`` (``mode`` as EXTEND's): one when
    ``one_script`` (one server, one slot), else one per name; each answers the lease left in
    ms, 0 when its name is gone."""
    if one_script:
        return [("many_extend", tuple(k.lock for k in all_keys), [ms, mode, *secrets])]
    record = lock_settings.stats
    return [
        (keys.script("extend"), (keys.lock, keys.stats), [secret, ms, mode, record])
        for keys, secret in zip(all_keys, secrets, strict=True)
    ]


def held_with(label: str | None, name: str, names: Iterable[str]) -> str:
    """The label a name of the set records: operators see the other names of its set (cut to
    a label's longest, as a set of many long names would make it grow with their square)."""
    others = ", ".join(other for other in names if other != name)
    note = f"held with {others}" if others else "held alone"
    return shorten(note if not label else f"{label} ({note})", MAX_LABEL_LENGTH)


def new_secrets(count: int) -> tuple[str, ...]:
    """128 random bits from the OS for each of ``count`` names, as hex (one read for them all)."""
    raw = os.urandom(16 * count).hex()
    return tuple(raw[at : at + 32] for at in range(0, len(raw), 32))
