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

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_redis_lock")

#: A Lock object acquired its lock.
lock_acquired = Signal()
#: A Lock object released its lock (the last release of a reentrant hold).
lock_released = Signal()
#: An acquire attempt found the lock held by someone else (sent once per acquire call).
lock_busy = Signal()
#: A hold was found taken away (sent once per hold): by a watchdog renewal, ``extend()``,
#: ``release()``, ``owned()`` or a second ``acquire()`` of the same object.
lock_lost = Signal()
#: A renewal by the watchdog failed (Redis out of reach, or it answered an error), and is
#: retried until the lease ends: alert before the hold is lost. Sent from the watchdog's
#: thread at each failed try, with ``error`` (the exception) and ``lease_left`` (seconds of
#: the lease left, as far as this process knows).
lock_renewal_failed = Signal()


def send(signal: Signal, lock: Any, fencing_token: int | None, **extra: Any) -> None:
    """Send ``signal`` for ``lock`` (and ``extra`` keyword arguments); a receiver that raises
    is logged, never propagated (it must not leave a lock held or stop the watchdog)."""
    if not signal.receivers:  # the common case, on the hot path: nothing to build
        return
    sender = type(lock)
    responses = signal.send_robust(
        sender, lock=lock, name=lock.name, fencing_token=fencing_token, **extra
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "Receiver %r of a lock signal for %r raised.",
                receiver,
                lock.name,
                exc_info=response,
            )
