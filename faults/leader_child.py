"""The command the leadership scenarios' supervisors run: writes the store with its epoch.

    manage.py locks lead faults:leader ... -- python faults/leader_child.py STORE INDEX WORK STOP

Started by a supervisor while its process leads, with the epoch in DJANGO_REDIS_LOCK_EPOCH. It
records when it started (its first statement), then loops until the stop file exists: work for
WORK seconds, write the counter with ``fenced_update(..., epoch)`` (an int token) and record
the section, accepted or refused. SIGTERM (the supervisor lost or gave up the leadership) ends
it with a "child-stop" record; the stop file with "child-exit". A child whose supervisor was
killed is orphaned and goes on: its writes are what the epoch must refuse.

SIGTERM's handler raises nothing, so that the signal never lands inside a write or its history
(faults/leader_history.py): each write's outcome is known, and a write under way when it comes
is finished, in a transaction's time; it is awaited in place of the work's sleep. The controller
passes where the history goes, when the supervisor started and the lease in the environment.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # first of all: the moment the failover and hand-over times end at

import os  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from types import FrameType  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faults.leader_history import LeaderHistory  # noqa: E402
from faults.store import Store  # noqa: E402

EPOCH_VARIABLE = "DJANGO_REDIS_LOCK_EPOCH"


class Stop:
    """SIGTERM, noted by its handler and awaited in place of a sleep: the signal writes to the
    wakeup fd, which ends the wait. (Not ``sigtimedwait``: resumed after a SIGSTOP that outlasted
    its timeout, it returns a siginfo of garbage, as if a signal had come.)"""

    def __init__(self) -> None:
        self.asked = False
        self._wakeup, writer = os.pipe()
        os.set_blocking(writer, False)
        signal.set_wakeup_fd(writer)
        signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if SIGTERM comes; whether it came."""
        if not self.asked:
            select.select([self._wakeup], [], [], seconds)
        return self.asked


def main(argv: list[str]) -> int:
    """Write with the epoch until SIGTERM or the stop file; the exit status."""
    stop = Stop()  # before anything that takes time
    store_path, index, work, stop_file = Path(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    epoch = int(os.environ[EPOCH_VARIABLE])
    store = Store(store_path)
    store.event(index, "child-start", f"epoch {epoch}", at=STARTED)
    history = LeaderHistory.from_environment(index, epoch)
    os.environ["FAULTS_STORE"] = str(store_path)  # the ORM's database (faults/settings.py)
    import django

    django.setup()
    while not Path(stop_file).exists():
        start = time.monotonic()
        if stop.wait(work):  # the work the epoch protects
            break
        history.writing()
        accepted, _ = store.write(index, epoch, start, None)
        history.wrote(accepted)
    history.resign()
    store.event(index, "child-stop" if stop.asked else "child-exit", f"epoch {epoch}")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
