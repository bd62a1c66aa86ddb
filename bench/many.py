"""What a lock of three names costs beside a lock of one, and two threads taking the same three
names in opposite orders.

    python3 dev.py bench many [--cycles 5000] [--repeats 3]

Starts its own Redis. Uncontended: ``with lock(name)`` and ``with lock_many([a, b, c])`` in
interleaved rounds (auto-renewal on, the default), medians of the repeats; the target is a
three-name cycle within 1.2 times a one-name cycle. Contended: two threads take
``lock_many`` of the same three names, one in the order given, the other reversed, 10,000
times in all; a shared counter says whether two were ever inside at once, and the run is
bounded in time, so a deadlock shows as a failure, not a hang.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rounds import command_line, cycle_of, interleaved, own_redis

NAMES = ["bench:a", "bench:b", "bench:c"]
OPPOSITE_ROUNDS = 10_000
# The opposite-order run fails past this many seconds: a deadlock must not hang the bench.
OPPOSITE_SECONDS = 120.0


def _opposite_orders() -> tuple[float, int, int]:
    """Seconds taken, overlaps seen, and rounds done by two threads in opposite orders."""
    from django_redis_lock import lock_many

    inside, overlaps, done = [0], [0], [0]
    failures: list[BaseException] = []

    def worker(names: list[str]) -> None:
        try:
            for _ in range(OPPOSITE_ROUNDS // 2):
                with lock_many(names, blocking_timeout=OPPOSITE_SECONDS):
                    inside[0] += 1
                    if inside[0] != 1:
                        overlaps[0] += 1
                    inside[0] -= 1
                done[0] += 1
        except BaseException as exc:
            failures.append(exc)

    started = time.perf_counter()
    threads = [
        threading.Thread(target=worker, args=(order,), daemon=True)
        for order in (NAMES, NAMES[::-1])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(OPPOSITE_SECONDS)
    if any(thread.is_alive() for thread in threads) or failures:
        raise SystemExit(f"opposite orders: a thread failed or never finished: {failures}")
    return time.perf_counter() - started, overlaps[0], done[0]


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/benchmarks.rst."""
    with own_redis():
        from django_redis_lock import lock, lock_many

        timers = {
            "one": cycle_of(lambda: lock("bench:one")),
            "three": cycle_of(lambda: lock_many(NAMES)),
        }
        found = interleaved(timers, cycles, repeats)
        seconds, overlaps, rounds = _opposite_orders()
    ratio = found["three"] / found["one"]
    return [
        f"uncontended cycle (acquire + release, auto-renewal on): one name {found['one']:.0f} "
        f"µs, three names {found['three']:.0f} µs ({ratio:.2f}x; target <= 1.2x)",
        f"two threads, the same three names in opposite orders: {rounds} holds in "
        f"{seconds:.1f} s, {overlaps} overlaps, no deadlock",
    ]


if __name__ == "__main__":
    command_line(measure, __doc__ or "")
