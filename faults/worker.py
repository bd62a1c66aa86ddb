"""A worker of the fault suite: takes the lock, writes the store under it, records everything.

    python faults/worker.py STORE INDEX VARIANT LEASE WORK BLOCKING_TIMEOUT STOP_FILE

Run by the controller (faults/run.py) with DJANGO_SETTINGS_MODULE=faults.settings. Until the
stop file exists it loops: take ``lock(NAME)`` (the semaphore variant: one of two places of
``semaphore(NAME, 2)``; the rwlock variant: ``rwlock(NAME)``, as a reader or the writer, one
pass in two of each on average), read the counter (read-write variant, and the rwlock's readers
and writer), work for WORK seconds, write with the hold's fencing token (a reader does not
write), release. Every pass ends in one record of the store: a section (in the store's write
transaction) or an event (busy, unavailable, lost, ...). Every operation is also recorded in
the worker's history (faults/recorder.py, in the store's directory under HISTORY), which the
controller checks for linearizability (faults/histories.py).
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faults.recorder import History

if TYPE_CHECKING:
    from django_redis_lock import Lock
    from faults.store import Store

NAME = "faults:counter"
# The histories' directory, beside the store.
HISTORY = "history"
# After Redis refused a call outright, the next try waits this long: a Redis that is down
# answers at once, and the loop would otherwise spin on the two cores the suite shares.
UNAVAILABLE_PAUSE = 0.1


def lock_key() -> str:
    """The Redis key of the lock NAME on the suite's cache, as the package computes it (on a
    cluster, its slot says which primary grants the lock)."""
    from django_redis_lock.runtime import runtime

    return runtime().backend().keys_for(NAME).lock


def wake_ups() -> str:
    """How this process's waiters are woken, as its "ready" event says (the report shows it):
    on a cluster, by sharded pub/sub or classic PUBLISH (asked of the backend the locks use);
    elsewhere "" (one way only)."""
    from django_redis_lock.backends.cluster import ClusterLockBackend
    from django_redis_lock.runtime import runtime

    backend = runtime().backend()
    if not isinstance(backend, ClusterLockBackend):
        return ""
    return "sharded wake-ups" if backend.sharded_wake_ups() else "classic wake-ups"


def history_of(store_path: Path, index: int) -> History:
    """This worker incarnation's history: process "<index>:<pid>" (a restarted worker is a new
    process)."""
    directory = store_path.parent / HISTORY
    directory.mkdir(exist_ok=True)
    return History(directory, f"{index}:{os.getpid()}")


@dataclass
class Worker:
    """One worker's loop: its store, history and settings."""

    store: Store
    history: History
    index: int
    variant: str
    lease: float
    work: float
    blocking_timeout: float

    def holder(self) -> tuple[Lock, str]:
        """A new holder for a pass, and what its operations are called after acquire/release:
        "" (the lock, a semaphore's place), "-read" or "-write" (the rwlock's)."""
        from django_redis_lock import lock, rwlock, semaphore
        from faults.store import RWLOCK, SEMAPHORE, SEMAPHORE_LIMIT

        timeout, wait = self.lease, self.blocking_timeout
        if self.variant == SEMAPHORE:
            place = semaphore(
                NAME, SEMAPHORE_LIMIT, timeout=timeout, blocking_timeout=wait, label="faults"
            )
            return place, ""
        if self.variant == RWLOCK:
            both = rwlock(NAME, timeout=timeout, blocking_timeout=wait, label="faults")
            return (both.write(), "-write") if random.random() < 0.5 else (both.read(), "-read")
        return lock(NAME, timeout=timeout, blocking_timeout=wait, label="faults"), ""

    def one_pass(self) -> None:
        """Acquire, the section, release: each recorded."""
        from django.db import DatabaseError

        from django_redis_lock import LockError, LockNotOwned, LockNotReplicated, LockUnavailable

        held, kind = self.holder()
        f = "acquire" + kind
        invoked = self.history.invoke(f, NAME)
        try:
            taken = held.acquire()
        except LockError as exc:  # maybe granted: its lease ends it
            self.history.info(f, NAME)
            self.history.expire(NAME, invoked + int(self.lease * 1e9), invoked)
            replicated = not isinstance(exc, LockNotReplicated)
            if isinstance(exc, LockUnavailable):
                self.store.event(self.index, "unavailable" if replicated else "not-replicated")
                time.sleep(UNAVAILABLE_PAUSE)
            else:
                self.store.event(self.index, "error", f"{type(exc).__name__}: {exc}")
            return
        if not taken:
            self.history.fail(f, NAME, "busy")
            self.store.event(self.index, "busy")
            return
        self.history.ok(f, NAME, held.fencing_token)
        lost = False
        try:
            self.section(held, kind)
        except LockNotOwned as exc:  # the watchdog found the hold gone: no write was tried
            lost = True
            self.store.event(self.index, "lost", str(exc))
        except (LockError, sqlite3.Error, DatabaseError) as exc:
            self.store.event(self.index, "error", f"{type(exc).__name__}: {exc}")
        finally:
            self.release(held, kind, invoked, lost=lost)

    def section(self, held: Lock, kind: str) -> None:
        """Read (the read-write variant, the rwlock's holders), work, write (but a reader)."""
        from faults.store import READ_WRITE, SEMAPHORE

        start = time.monotonic()
        read = self.read() if self.variant == READ_WRITE or kind else None
        time.sleep(self.work)  # the work the section protects
        if kind == "-read":
            return
        if self.variant == SEMAPHORE:  # side by side, unfenced: the semaphore's model checks it
            self.store.write(self.index, held, start, None, fenced=False)
            return
        token = held.fencing_token
        data = None if read is None else read + 1
        self.history.invoke("write", NAME, [token, data])
        try:
            accepted, _ = self.store.write(self.index, held, start, read)
        except BaseException:
            self.history.info("write", NAME, [token, data])
            raise
        (self.history.ok if accepted else self.history.fail)("write", NAME, [token, data])

    def read(self) -> int:
        """The counter's value, recorded as a read of [token, value] (null before any write)."""
        self.history.invoke("read", NAME)
        try:
            value, token = self.store.counter()
        except BaseException:
            self.history.info("read", NAME)
            raise
        self.history.ok("read", NAME, [token, value] if token else None)
        return value

    def release(self, held: Lock, kind: str, invoked: int, *, lost: bool = False) -> None:
        """Release; a hold found gone ended by its lease (from ``invoked``, its acquire's);
        ``lost``: the section found it gone already (recorded then)."""
        from django_redis_lock import LockError, LockNotOwned, LockNotReplicated, LockUnavailable

        f = "release" + kind
        self.history.invoke(f, NAME)
        try:
            held.release()
        except LockNotOwned as exc:
            self.history.fail(f, NAME)
            self.history.expire(NAME, invoked + int(self.lease * 1e9), invoked)
            if not lost:
                self.store.event(self.index, "lost", str(exc))
        except LockNotReplicated as exc:
            self.history.info(f, NAME)
            self.store.event(self.index, "release-not-replicated", str(exc))
        except LockUnavailable as exc:
            self.history.info(f, NAME)
            self.store.event(self.index, "release-unavailable", str(exc))
        except LockError as exc:
            self.history.info(f, NAME)
            self.store.event(self.index, "error", f"{type(exc).__name__}: {exc}")
        else:
            self.history.ok(f, NAME)


def main(argv: list[str]) -> None:
    """Run the loop until the stop file appears."""
    store_path, index, variant = Path(argv[0]), int(argv[1]), argv[2]
    lease, work, blocking_timeout = float(argv[3]), float(argv[4]), float(argv[5])
    stop_file = Path(argv[6])

    import django

    os.environ["FAULTS_STORE"] = str(store_path)  # the ORM's database (faults/settings.py)
    django.setup()
    from faults.store import Store

    store = Store(store_path)
    history = history_of(store_path, index)
    worker = Worker(store, history, index, variant, lease, work, blocking_timeout)
    store.event(index, "ready", wake_ups())
    while not stop_file.exists():
        worker.one_pass()
    store.event(index, "exit")
    history.close()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
