"""The leadership scenarios' history, for the ``leader`` model of faults/history/.

Each child a supervisor starts is one process of the history, ``sup<INDEX>-e<EPOCH>``: one
leadership. It records, on the key ``faults:leader``:

``elected`` (ok value: the epoch)
    invoked at the moment its supervisor was started (FAULTS_ELECTABLE: the controller's clock
    just before it spawned the supervisor), the earliest the election can have happened; the
    child only learns of it at its start. Completed ``ok`` once the store accepted its first
    write, not at the child's start: the store learns of an epoch only from its first write,
    and until then it accepts the writes of the deposed epoch (an orphan's, a resumed
    child's: fencing cannot know of a grant it has not seen, and the documentation allows
    them). So the first write is part of the election, not an ``act`` of its own. A child
    whose writes were all refused completes it ``info``: the store never took it as leader.
``act`` (value: the epoch)
    each later write: ``ok`` accepted by the store, ``fail`` refused as stale (it did not
    happen). An ``act`` accepted from an epoch the store had already seen superseded is
    what the model rejects.
``resigned``
    invoked when the child is told to stop (SIGTERM: its supervisor resigns or lost the
    leadership) or finds the stop file; completed ``info``: the supervisor resigns after the
    child stopped, or had already lost the leadership (then it resigned nothing).
``expire`` (pseudo-process ``<process>/lease``)
    written at the child's start, invoked at FAULTS_ELECTABLE plus the lease: the earliest the
    lease can run out. The child never knows how its leadership ended (a kill of its
    supervisor, a stop past the lease, a partition), so every leadership gets one; the checker
    leaves out whichever of it and ``resigned`` did not happen.

A child that was killed leaves its last operation without a completion: ``info``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from faults.recorder import History

#: The key of the leadership's operations (the leadership's name).
KEY = "faults:leader"
#: Where the children write their histories (a directory).
HISTORY_VARIABLE = "FAULTS_HISTORY"
#: The controller's monotonic clock (ns) just before it started the child's supervisor.
ELECTABLE_VARIABLE = "FAULTS_ELECTABLE"
#: The leadership's lease (seconds), the supervisor's --timeout.
LEASE_VARIABLE = "FAULTS_LEASE"


def environment(directory: Path, lease: float) -> dict[str, str]:
    """What the controller adds to a supervisor's environment (which its child inherits) just
    before it starts it."""
    return {
        HISTORY_VARIABLE: str(directory),
        ELECTABLE_VARIABLE: str(time.monotonic_ns()),
        LEASE_VARIABLE: repr(lease),
    }


def process(index: int, epoch: int) -> str:
    """The history's process of the child of supervisor ``index`` leading with ``epoch``."""
    return f"sup{index}-e{epoch}"


class LeaderHistory:
    """The history of one child: one leadership, its writes and its end (see the module)."""

    def __init__(
        self, directory: Path, index: int, epoch: int, electable: int, lease: float
    ) -> None:
        self.history = History(directory, process(index, epoch))
        self.epoch = epoch
        self.elected = False  # the store accepted a write of the epoch
        self.history.event("invoke", "elected", KEY, None, at=electable)
        self.history.expire(KEY, electable + round(lease * 1e9), electable)

    @classmethod
    def from_environment(cls, index: int, epoch: int) -> LeaderHistory:
        """The history the controller asked for in the environment (``environment``)."""
        directory, electable = os.environ[HISTORY_VARIABLE], os.environ[ELECTABLE_VARIABLE]
        return cls(Path(directory), index, epoch, int(electable), float(os.environ[LEASE_VARIABLE]))

    def writing(self) -> None:
        """A write is about to start (the first accepted one completes the election)."""
        if self.elected:
            self.history.invoke("act", KEY, self.epoch)

    def wrote(self, accepted: bool) -> None:
        """The write ended: accepted or refused by the store."""
        if self.elected:
            (self.history.ok if accepted else self.history.fail)("act", KEY, self.epoch)
        elif accepted:
            self.history.ok("elected", KEY, self.epoch)
            self.elected = True

    def resign(self) -> None:
        """The child stops (told to, or by the stop file); it writes nothing more."""
        if not self.elected:
            self.history.info("elected", KEY, self.epoch)
        self.history.invoke("resigned", KEY)
        self.history.info("resigned", KEY)
        self.history.close()
