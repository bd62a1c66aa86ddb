"""Signals sent by the lock core.

Every signal is sent with ``sender=Lock`` (the class) and these keyword arguments:

``lock``
    the :class:`~django_redis_lock.lock.Lock` object concerned;
``name``
    the lock name;
``fencing_token``
    the fencing token of the hold concerned (``None`` for ``lock_busy``).

Receivers of ``lock_lost`` may run in the watchdog thread: keep them short.
"""

from __future__ import annotations

from django.dispatch import Signal

#: A Lock object acquired its lock.
lock_acquired = Signal()
#: A Lock object released its lock (the last release of a reentrant hold).
lock_released = Signal()
#: An acquire attempt found the lock held by someone else (sent once per acquire call).
lock_busy = Signal()
#: A hold was found taken away (sent once per hold): by a watchdog renewal, ``extend()``,
#: ``release()``, ``owned()`` or a second ``acquire()`` of the same object.
lock_lost = Signal()
