"""Distributed locks for Django on the project's Redis cache."""

from django_redis_lock.decorators import locked
from django_redis_lock.exceptions import (
    LockBusy,
    LockError,
    LockNotOwned,
    LockNotReplicated,
    LockUnavailable,
)
from django_redis_lock.lock import Lock
from django_redis_lock.manager import LockInfo, LockManager, Released, get_lock_manager, lock
from django_redis_lock.validation import MAX_LABEL_LENGTH, MAX_NAME_LENGTH, MAX_TIMEOUT

__all__ = [
    "MAX_LABEL_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_TIMEOUT",
    "Lock",
    "LockBusy",
    "LockError",
    "LockInfo",
    "LockManager",
    "LockNotOwned",
    "LockNotReplicated",
    "LockUnavailable",
    "Released",
    "get_lock_manager",
    "lock",
    "locked",
]
