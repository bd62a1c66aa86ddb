"""A worker of the fault suite: takes the lock, writes the store under it, records everything.

    python faults/worker.py STORE INDEX VARIANT LEASE WORK BLOCKING_TIMEOUT STOP_FILE

Run by the controller (faults/run.py) with DJANGO_SETTINGS_MODULE=faults.settings. Until the
stop file exists it loops: ``with lock(NAME)`` (the semaphore variant: one of two places of
``semaphore(NAME, 2)``), read the counter (read-write variant), work for WORK seconds, write
with the hold's fencing token, release. Every pass ends in one record:
a section (in the store's write transaction) or an event (busy, unavailable, lost, ...).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NAME = "faults:counter"
# After Redis refused a call outright, the next try waits this long: a Redis that is down
# answers at once, and the loop would otherwise spin on the two cores the suite shares.
UNAVAILABLE_PAUSE = 0.1


def lock_key() -> str:
    """The Redis key of the lock NAME on the suite's cache, as the package computes it (on a
    cluster, its slot says which primary grants the lock)."""
    from django_redis_lock.runtime import runtime

    return runtime().backend().keys_for(NAME).lock


def main(argv: list[str]) -> None:
    """Run the loop until the stop file appears."""
    store_path, index, variant = Path(argv[0]), int(argv[1]), argv[2]
    lease, work, blocking_timeout = float(argv[3]), float(argv[4]), float(argv[5])
    stop_file = Path(argv[6])

    import os

    import django

    os.environ["FAULTS_STORE"] = str(store_path)  # the ORM's database (faults/settings.py)
    django.setup()
    from django.db import DatabaseError

    from django_redis_lock import (
        Lock,
        LockBusy,
        LockError,
        LockNotOwned,
        LockNotReplicated,
        LockUnavailable,
        lock,
        semaphore,
    )
    from faults.store import READ_WRITE, SEMAPHORE, SEMAPHORE_LIMIT, Store

    store = Store(store_path)
    store.event(index, "ready")
    while not stop_file.exists():
        held: Lock
        if variant == SEMAPHORE:
            held = semaphore(
                NAME,
                SEMAPHORE_LIMIT,
                timeout=lease,
                blocking_timeout=blocking_timeout,
                label="faults",
            )
        else:
            held = lock(NAME, timeout=lease, blocking_timeout=blocking_timeout, label="faults")
        wrote = False
        try:
            with held:
                start = time.monotonic()
                read = store.read() if variant == READ_WRITE else None
                time.sleep(work)  # the work the section protects
                store.write(index, held, start, read, fenced=variant != SEMAPHORE)
                wrote = True
        except LockBusy:
            store.event(index, "busy")
        except LockNotOwned as exc:
            store.event(index, "lost", str(exc))
        except LockNotReplicated as exc:
            store.event(index, "release-not-replicated" if wrote else "not-replicated", str(exc))
        except LockUnavailable as exc:
            store.event(index, "release-unavailable" if wrote else "unavailable", str(exc))
            if not wrote:
                time.sleep(UNAVAILABLE_PAUSE)
        except (LockError, sqlite3.Error, DatabaseError) as exc:
            store.event(index, "error", f"{type(exc).__name__}: {exc}")
    store.event(index, "exit")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
