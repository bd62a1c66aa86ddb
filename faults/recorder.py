"""Histories of the fault suite: what each process asked for and what it was told, as JSON Lines
that ``python3 dev.py check-history`` checks for linearizability (faults/history/).

One file per process (its writes need no lock), one event a line, Jepsen's shape::

    {"process": 3, "type": "invoke", "f": "acquire", "key": "faults:counter", "value": null,
     "time": 1234567890}

``invoke`` starts an operation, then exactly one of ``ok`` (it happened), ``fail`` (it certainly
did not) or ``info`` (unknown: it may have taken effect at any time after its invoke, or never)
ends it. Times are ``time.monotonic_ns()``: one clock for every process of the machine. Each
event is flushed as it is written: a process killed at any moment leaves whole lines (an invoke
without its completion counts as ``info``).

A hold whose end is not known (its holder was killed, or its release found it gone) ends by its
lease: :meth:`History.expire` records that as an ``expire`` of a pseudo-process
``<process>/lease``, invoked at the earliest moment the lease can have run out and completed
``info``; its value is ``[process, the invoke time of the acquire that granted the hold]``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: The extension of a history file; :func:`merge` reads every such file of a directory.
SUFFIX = ".history.jsonl"


class History:
    """The history file of one process (``process``: its id in the history) in ``directory``."""

    def __init__(self, directory: Path, process: int | str) -> None:
        self.process = process
        self.path = Path(directory) / f"{process}-{os.getpid()}{SUFFIX}"
        self._file = self.path.open("a", encoding="utf-8", buffering=1)

    def close(self) -> None:
        self._file.close()

    def event(
        self,
        kind: str,
        f: str,
        key: str,
        value: Any = None,
        *,
        process: int | str | None = None,
        at: int | None = None,
    ) -> int:
        """Write one event (``kind``: invoke, ok, fail or info); its time (ns)."""
        stamp = time.monotonic_ns() if at is None else at
        record = {
            "process": self.process if process is None else process,
            "type": kind,
            "f": f,
            "key": key,
            "value": value,
            "time": stamp,
        }
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        return stamp

    def invoke(self, f: str, key: str, value: Any = None) -> int:
        """Start an operation; its invoke time (ns)."""
        return self.event("invoke", f, key, value)

    def ok(self, f: str, key: str, value: Any = None) -> int:
        return self.event("ok", f, key, value)

    def fail(self, f: str, key: str, value: Any = None) -> int:
        return self.event("fail", f, key, value)

    def info(self, f: str, key: str, value: Any = None) -> int:
        return self.event("info", f, key, value)

    def expire(self, key: str, earliest: int, acquired: int | None = None) -> None:
        """The hold of this process on ``key`` ended by its lease, not before ``earliest`` (ns:
        its acquire's invoke time plus the lease), at a time not known. ``acquired``: the
        invoke time of that acquire, written in the value ``[process, acquired]`` so that the
        expire ends that hold only (without it the value is the process, which the checker
        lets end any of its holds granted before ``earliest``: looser)."""
        lease = f"{self.process}/lease"
        value = self.process if acquired is None else [self.process, acquired]
        self.event("invoke", "expire", key, value, process=lease, at=earliest)
        self.event(
            "info", "expire", key, value, process=lease, at=max(earliest, time.monotonic_ns())
        )


def events(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """The events of history files, file after file (a torn last line, from a process killed
    while it wrote, is left out)."""
    for path in paths:
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                if line.endswith("\n"):
                    yield json.loads(line)


def merge(directory: Path, target: Path) -> int:
    """Write the events of every history file of ``directory`` into ``target``, ordered by
    time; how many."""
    found = sorted(events(sorted(Path(directory).glob(f"*{SUFFIX}"))), key=lambda e: e["time"])
    with Path(target).open("w", encoding="utf-8") as out:
        for each in found:
            out.write(json.dumps(each, separators=(",", ":")) + "\n")
    return len(found)
