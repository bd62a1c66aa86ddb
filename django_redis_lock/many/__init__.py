"""Several lock names at once, all or none: ``lock_many(["a", "b"])`` (see ``multi.py``)."""

from __future__ import annotations

from django_redis_lock.many.multi import MultiLock

#: ``lock_many(names, *, timeout=None, blocking=True, blocking_timeout=None, auto_renew=None,
#: label=None, using=None)``: a MultiLock of ``names``, not yet acquired (see
#: :class:`MultiLock`).
lock_many = MultiLock

__all__ = ["MultiLock", "lock_many"]
