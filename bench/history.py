"""How long the linearizability checker takes on a large history (issue 41: 100,000 operations
over 50 keys in under 60 s on 2 cores).

    python3 dev.py bench history [--operations 100000] [--keys 50] [--processes 4] [--seed 1]
                                 [--inject FRACTION]

Generates a valid concurrent mutex history by simulation, keys interleaved in time: on each
key ``--processes`` processes acquire (a try: refused while it is held), hold for a while and
release; every operation takes effect at a random moment between its invoke and its completion
(50 to 500 µs each side), so the invokes of a key's processes overlap. One completion in 50 is
lost (``info``): an acquire so lost that was granted holds until its 20 ms lease runs out, and
gets an ``expire`` as faults/recorder.py writes it (value: the holder and the acquire's invoke
time). ``--inject``: a double grant in the first key, that far through its holds (an acquire by
a process of its own, granted in the middle of a known hold): the search must then prove no
order explains it. Then times ``check_file`` on it (one
process: the checker is single-threaded; keys could be spread over processes, if ever needed).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from faults.history import check_file  # noqa: E402

US = 1_000
LATENCY = (50 * US, 500 * US)
THINK = (0, 2_000 * US)
LEASE = 20_000 * US
LOST = 0.02


class Key:
    """One key's simulation: the lock's true holder and when its lease ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.holder: int | None = None
        self.until = 0
        self.events: list[dict[str, Any]] = []
        self.operations = 0

    def event(self, process: int | str, kind: str, f: str, value: Any, at: int) -> None:
        self.events.append(
            {"process": process, "type": kind, "f": f, "key": self.name, "value": value, "time": at}
        )

    def apply(self, process: int, f: str, now: int) -> bool:
        """The operation takes effect now: granted/released, or refused."""
        if self.holder is not None and self.until <= now:
            self.holder = None  # the lease ran out
        if f == "acquire":
            if self.holder is not None:
                return False
            self.holder, self.until = process, now + LEASE
            return True
        if self.holder == process:
            self.holder = None
            return True
        return False


def simulate(key: Key, processes: list[int], target: int, rng: random.Random) -> None:
    """Run the processes of one key until it has ``target`` operations."""
    holds = dict.fromkeys(processes, False)
    queue = [(rng.randrange(*THINK), process, "invoke", "", 0) for process in processes]
    heapq.heapify(queue)
    while queue:
        now, process, phase, f, invoked = heapq.heappop(queue)
        if phase == "invoke":
            if key.operations >= target:
                continue
            f = "release" if holds[process] else "acquire"
            key.event(process, "invoke", f, None, now)
            key.operations += 1
            heapq.heappush(queue, (now + rng.randrange(*LATENCY), process, "apply", f, now))
        elif phase == "apply":
            done = key.apply(process, f, now)
            end = now + rng.randrange(*LATENCY)
            kind = "info" if rng.random() < LOST else ("ok" if done else "fail")
            heapq.heappush(queue, (end, process, kind, f, invoked))
        else:
            key.event(process, phase, f, None, now)
            holds[process] = f == "acquire" and phase == "ok"
            if f == "acquire" and phase == "info":  # as the recorder: an expire by the lease
                key.event(
                    f"{process}/lease", "invoke", "expire", [process, invoked], invoked + LEASE
                )
                key.event(
                    f"{process}/lease", "info", "expire", [process, invoked], invoked + LEASE + 1
                )
                key.operations += 1
            heapq.heappush(queue, (now + rng.randrange(*THINK), process, "invoke", "", 0))


def inject(key: Key, fraction: float) -> None:
    """A second holder granted in the middle of a hold whose release is known."""
    events = sorted(key.events, key=lambda event: event["time"])
    grants = [e for e in events if e["f"] == "acquire" and e["type"] == "ok"]
    grant = grants[min(int(len(grants) * fraction), len(grants) - 1)]
    end = next(e for e in events if e["time"] > grant["time"] and e["process"] == grant["process"])
    middle = (grant["time"] + end["time"]) // 2
    key.event("intruder", "invoke", "acquire", None, middle)
    key.event("intruder", "ok", "acquire", None, middle + 1)
    key.operations += 1


def generate(
    path: Path, operations: int, keys: int, processes: int, seed: int, at: float | None = None
) -> int:
    """Write the history (a double grant ``at`` that fraction of the first key, if given); its
    number of events."""
    rng = random.Random(seed)
    events = []
    for k in range(keys):
        key = Key(f"bench:{k}")
        simulate(key, [k * processes + j for j in range(processes)], operations // keys, rng)
        if k == 0 and at is not None:
            inject(key, at)
        events += key.events
    events.sort(key=lambda event: event["time"])
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--inject", type=float, metavar="FRACTION", help="a double grant there")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        path = Path(tmp) / "bench.history.jsonl"
        count = generate(
            path, options.operations, options.keys, options.processes, options.seed, options.inject
        )
        started = time.perf_counter()
        verdict = check_file(path, "mutex")
        took = time.perf_counter() - started
    print(f"{count} events, {verdict.operations} operations over {verdict.keys} keys")
    print(verdict.last_line())
    print(f"checked in {took:.1f} s")
    if verdict.linearizable == (options.inject is not None):
        sys.exit(1)  # a violation missed, or one found where there is none


if __name__ == "__main__":
    main()
