"""The command the leadership scenarios' supervisors run: writes the store with its epoch.

    manage.py locks lead faults:leader ... -- python faults/leader_child.py STORE INDEX WORK STOP

Started by a supervisor while its process leads, with the epoch in DJANGO_REDIS_LOCK_EPOCH. It
records when it started (its first statement), then loops until the stop file exists: work for
WORK seconds, write the counter with ``fenced_update(..., epoch)`` (an int token) and record
the section, accepted or refused. SIGTERM (the supervisor lost or gave up the leadership) ends
it with a "child-stop" record; the stop file with "child-exit". A child whose supervisor was
killed is orphaned and goes on: its writes are what the epoch must refuse.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # first of all: the moment the failover and hand-over times end at

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from types import FrameType  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faults.store import Store  # noqa: E402

EPOCH_VARIABLE = "DJANGO_REDIS_LOCK_EPOCH"


class Stopped(BaseException):
    """Raised by SIGTERM: the loop ends (a write under way is rolled back by its atomic block)."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def main(argv: list[str]) -> int:
    """Write with the epoch until SIGTERM or the stop file; the exit status."""
    signal.signal(signal.SIGTERM, _stop)  # before anything that takes time
    store_path, index, work, stop_file = Path(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    epoch = int(os.environ[EPOCH_VARIABLE])
    store = Store(store_path)
    store.event(index, "child-start", f"epoch {epoch}", at=STARTED)
    try:
        os.environ["FAULTS_STORE"] = str(store_path)  # the ORM's database (faults/settings.py)
        import django

        django.setup()
        while not Path(stop_file).exists():
            start = time.monotonic()
            time.sleep(work)  # the work the epoch protects
            store.write(index, epoch, start, None)
    except Stopped:
        store.event(index, "child-stop", f"epoch {epoch}")
        return 0
    store.event(index, "child-exit", f"epoch {epoch}")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
