"""The store the workers protect: a SQLite file with a fenced counter, and the run's records.

The counter row holds a value and the last fencing token accepted (``faults/models.py``: a
``FenceField``). The workers write it with the package's ``fenced_update()``: accepted only when
the hold's token is at least the stored one, in the same statement that makes the write
(``UPDATE ... WHERE token <= ?``). Each write and its critical section are recorded in the same
transaction, so the rows of ``sections`` are in the order the store committed them.

Two ways of writing, the two variants of a run:

``fenced``
    ``value=F("value") + 1``: the increment is computed by the store.
``read-write``
    the value read at the start of the section, plus one: what a ``SELECT`` then ``save()``
    does. Fencing still refuses a write older than one already accepted, but not one that is
    accepted first and then overwritten by a holder that read before it: a lost update.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_redis_lock import Lock

FENCED = "fenced"
READ_WRITE = "read-write"
# The workers take one of SEMAPHORE_LIMIT places of a semaphore instead of the lock, and write
# unfenced (the holders write side by side): the checker counts holders past the limit.
SEMAPHORE = "semaphore"
SEMAPHORE_LIMIT = 2
# The workers take ``rwlock(NAME)``, as a reader (they read the counter) or as the writer (they
# read it and write the value read plus one, fenced: exclusive, nothing is lost).
RWLOCK = "rwlock"
VARIANTS = (FENCED, READ_WRITE)
COUNTER = "faults"
# Workers wait for each other's short transactions; a paused worker may hold one a while.
BUSY_TIMEOUT = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS counter (
    name TEXT PRIMARY KEY, value INTEGER NOT NULL, token INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sections (
    id INTEGER PRIMARY KEY, worker INTEGER NOT NULL, pid INTEGER NOT NULL,
    token INTEGER NOT NULL, start REAL NOT NULL, end REAL NOT NULL, wall REAL NOT NULL,
    accepted INTEGER NOT NULL, read_value INTEGER
);
CREATE TABLE IF NOT EXISTS events (
    worker INTEGER NOT NULL, pid INTEGER NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS faults (
    kind TEXT NOT NULL, start REAL NOT NULL, end REAL NOT NULL, wall REAL NOT NULL,
    detail TEXT NOT NULL
);
"""


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) with WAL journaling."""
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def create(path: Path) -> None:
    """Create the store with the counter at 0 and token 0."""
    with connect(path) as connection:
        connection.executescript(SCHEMA)
        connection.execute("INSERT INTO counter VALUES (?, 0, 0)", (COUNTER,))
    connection.close()


@dataclass(frozen=True)
class Section:
    """One critical section as the store saw it (times: CLOCK_MONOTONIC, shared by processes)."""

    id: int
    worker: int
    pid: int
    token: int
    start: float
    end: float
    wall: float
    accepted: bool
    read_value: int | None


@dataclass(frozen=True)
class Event:
    """Something a worker saw that is not a section: busy, unavailable, lost, error."""

    worker: int
    pid: int
    kind: str
    at: float
    detail: str


@dataclass(frozen=True)
class Fault:
    """One fault the controller injected: from ``start`` until ``end`` (monotonic)."""

    kind: str
    start: float
    end: float
    wall: float
    detail: str


class Store:
    """A worker's or the controller's connection to the store."""

    def __init__(self, path: Path) -> None:
        self.connection = connect(path)

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def read(self) -> int:
        """The counter's value (what a read-then-write section starts from)."""
        row = self.connection.execute("SELECT value FROM counter WHERE name = ?", (COUNTER,))
        return int(row.fetchone()[0])

    def write(
        self,
        worker: int,
        hold: Lock | int,
        start: float,
        read_value: int | None,
        *,
        fenced: bool = True,
    ) -> tuple[bool, float]:
        """Write under ``hold`` (a held lock, or a leader's epoch: an int token) with the ORM
        (``fenced_update``); record the section, in the same transaction. (accepted, commit
        time)

        ``read_value`` None: the store increments (fenced, unless ``fenced`` is False: a
        semaphore's holders write side by side); else it stores read_value + 1.
        """
        from django.db import connection, transaction
        from django.db.models import F, Value
        from django.db.models.functions import Greatest

        from django_redis_lock import StaleFencingToken, fenced_update
        from faults.models import Counter

        token = hold if isinstance(hold, int) else hold.fencing_token
        assert token is not None
        counter = Counter.objects.filter(name=COUNTER)
        with transaction.atomic():
            if not fenced:
                counter.update(value=F("value") + 1, token=Greatest("token", Value(token)))
                accepted = True
            else:
                value = F("value") + 1 if read_value is None else read_value + 1
                try:
                    accepted = fenced_update(counter, hold, value=value) == 1
                except StaleFencingToken:
                    accepted = False
            end = time.monotonic()
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO sections (worker, pid, token, start, end, wall, accepted, "
                    "read_value) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [worker, os.getpid(), token, start, end, time.time(), accepted, read_value],
                )
        return accepted, end

    def event(self, worker: int, kind: str, detail: str = "", at: float | None = None) -> None:
        """Record an event of this worker, at ``at`` (monotonic; None: now)."""
        moment = time.monotonic() if at is None else at
        self.connection.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            (worker, os.getpid(), kind, moment, detail[:500]),
        )

    def fault(self, kind: str, start: float, end: float, detail: str = "") -> None:
        """Record a fault the controller injected (``start`` and ``end`` monotonic)."""
        wall = time.time() - (time.monotonic() - start)
        self.connection.execute(
            "INSERT INTO faults VALUES (?, ?, ?, ?, ?)", (kind, start, end, wall, detail)
        )

    def counter(self) -> tuple[int, int]:
        """The counter's value and token."""
        row = self.connection.execute(
            "SELECT value, token FROM counter WHERE name = ?", (COUNTER,)
        ).fetchone()
        return int(row[0]), int(row[1])

    def sections(self) -> list[Section]:
        """Every recorded section, in commit order."""
        rows = self.connection.execute("SELECT * FROM sections ORDER BY id")
        return [Section(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), r[8]) for r in rows]

    def events(self) -> list[Event]:
        """Every recorded event, oldest first."""
        rows = self.connection.execute("SELECT * FROM events ORDER BY at")
        return [Event(*row) for row in rows]

    def faults(self) -> list[Fault]:
        """Every recorded fault, oldest first."""
        rows = self.connection.execute("SELECT * FROM faults ORDER BY start")
        return [Fault(*row) for row in rows]
