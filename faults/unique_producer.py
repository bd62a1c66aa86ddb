"""A producer of the unique-task scenarios: enqueues @unique tasks until told to stop.

    python faults/unique_producer.py SEED KEYS KILL_SHARE PAUSE STOP_FILE

Loops until STOP_FILE exists: picks a task of faults/unique_app.py (each mode in turn) and
one of KEYS keys, sends it with ``apply_async(task_id=<its own id>)`` and records the
enqueue (``enq``: its start time, the id it chose, the task, the key, and ``[the id it got
back, its end time]``: the same id if the task was sent, the holder's if it was a
duplicate) or the error (``enq-error``). A share KILL_SHARE of the default and debounce tasks
are sent with ``kill=True``: their worker kills itself once the task ran, before it
acknowledges it.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str]) -> None:
    seed, keys, kill_share, pause = int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3])
    stop_file = Path(argv[4])
    from faults.unique_app import TASKS, record

    chance = random.Random(seed)
    modes = sorted(TASKS)
    turn = seed
    while not stop_file.exists():
        mode = modes[turn % len(modes)]
        turn += 1
        task, key = TASKS[mode], f"{chance.randrange(keys)}"
        kill = mode != "window" and chance.random() < kill_share
        own = str(uuid.uuid4())
        start = time.monotonic()
        try:
            got = task.apply_async((key,), {"kill": kill}, task_id=own).id
        except Exception as exc:  # recorded: the checker says whether it was allowed
            record("enq-error", own, task.name, key, [type(exc).__name__, str(exc)])
        else:
            record("enq", own, task.name, key, [str(got), time.monotonic()], at=start)
        time.sleep(pause)


if __name__ == "__main__":
    main(sys.argv[1:])
