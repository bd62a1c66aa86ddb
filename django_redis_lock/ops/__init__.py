"""Operating locks from code: the managers of one alias's locks and of a quorum's, what they
hand out, and ``manage.py locks doctor``'s checks of the live deployment."""

from __future__ import annotations

from collections.abc import Sequence

from django_redis_lock.backends.quorum import QuorumBackend
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.ops.quorum_manager import QuorumLockManager
from django_redis_lock.ops.server_manager import ServerLockManager
from django_redis_lock.runtime import runtime
from django_redis_lock.validation import validate_using


def get_lock_manager(using: str | Sequence[str] | None = None) -> LockManager:
    """The LockManager of cache alias ``using`` (None: the REDIS_LOCK CACHE setting): a
    :class:`ServerLockManager`; of a list of aliases, their quorum's: a
    :class:`QuorumLockManager`."""
    backend = runtime().backend(validate_using(using))
    if isinstance(backend, QuorumBackend):
        return QuorumLockManager(backend)
    assert isinstance(backend, LockBackend)
    return ServerLockManager(backend)
