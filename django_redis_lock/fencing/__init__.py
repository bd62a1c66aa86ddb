"""Fencing that reaches the database: a row remembers the last fencing token it accepted, and
refuses a write that carries an older one, in the same ``UPDATE`` that makes the write.

A holder paused past its lease (a long GC, a SIGSTOP, a VM migration) may wake up and write
after the next holder has taken the lock and written: the row has accepted the later token
already, so the stale write matches no row and :class:`StaleFencingToken` says so.

``fields``: :class:`FenceField`, and how a model's fence is found. ``writes``:
:func:`fenced_update`, :class:`FencedQuerySet`, and :class:`FencedModelMixin` for ``save()``.
"""

from django_redis_lock.fencing.fields import FenceField
from django_redis_lock.fencing.writes import FencedModelMixin, FencedQuerySet, fenced_update

__all__ = ["FenceField", "FencedModelMixin", "FencedQuerySet", "fenced_update"]
