"""Distributed locks for Django on the project's Redis cache.

The public names, re-exported; nothing else. ``django_redis_lock.signals``,
``django_redis_lock.exceptions`` and ``django_redis_lock.display`` are public modules too.
"""

from django_redis_lock.cached import acache_once, cache_once, cached_once
from django_redis_lock.core.current import current_lock
from django_redis_lock.core.lock import Lock
from django_redis_lock.core.shared import ReadWriteLock, SharedLock, rwlock, semaphore
from django_redis_lock.exceptions import (
    AlreadyQueued,
    LeadershipLost,
    LockBusy,
    LockError,
    LockNotOwned,
    LockNotReplicated,
    LockUnavailable,
    RateLimited,
    Skipped,
    StaleFencingToken,
)
from django_redis_lock.fencing import FencedModelMixin, FencedQuerySet, FenceField, fenced_update
from django_redis_lock.leader import Leadership, leader
from django_redis_lock.locked import locked
from django_redis_lock.many import MultiLock, lock_many
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.ops.records import Listing, LockInfo, LockPage, Released
from django_redis_lock.rate import RateLimit, Turn, rate_limit
from django_redis_lock.stats import LockStats
from django_redis_lock.unique import unique
from django_redis_lock.validation import MAX_LABEL_LENGTH, MAX_NAME_LENGTH, MAX_TIMEOUT

#: ``lock(name, *, timeout=None, blocking=True, blocking_timeout=None, auto_renew=None,
#: reentrant=False, label=None, using=None, template=None)``: a Lock, not yet acquired (see
#: :class:`Lock`).
lock = Lock

__all__ = [
    "MAX_LABEL_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_TIMEOUT",
    "AlreadyQueued",
    "FenceField",
    "FencedModelMixin",
    "FencedQuerySet",
    "Leadership",
    "LeadershipLost",
    "Listing",
    "Lock",
    "LockBusy",
    "LockError",
    "LockInfo",
    "LockManager",
    "LockNotOwned",
    "LockNotReplicated",
    "LockPage",
    "LockStats",
    "LockUnavailable",
    "MultiLock",
    "RateLimit",
    "RateLimited",
    "ReadWriteLock",
    "Released",
    "SharedLock",
    "Skipped",
    "StaleFencingToken",
    "Turn",
    "acache_once",
    "cache_once",
    "cached_once",
    "current_lock",
    "fenced_update",
    "get_lock_manager",
    "leader",
    "lock",
    "lock_many",
    "locked",
    "rate_limit",
    "rwlock",
    "semaphore",
    "unique",
]
