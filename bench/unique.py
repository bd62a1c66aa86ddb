"""The producer's cost of @unique: time and Redis round trips per enqueue, each mode against a
plain ``.delay()``.

    python3 dev.py bench unique [--count N] [--repeats R]

Starts two redis-servers of its own on loopback ports: one for the locks (the cache), one for
Celery's broker and results. No worker runs: only the producer's side is measured, a real
send to the broker each time. Every enqueue uses a key no other took (the enqueue that takes
the key and sends); the *duplicate* columns time a second enqueue of a key already held
(nothing is sent; ``on_duplicate="replace"``: sent, the key taken over). Round trips are
those to the locks' Redis, counted by a connection class that counts each packet it sends (a
pipeline is one); *commands* are what the server's INFO commandstats counted. The rounds of
the modes take turns; each figure is the median of the repeats.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

ROUNDS = 4  # rounds per repeat; the modes take turns round by round


class Counting(redis.Connection):
    """A redis-py connection that counts what it sends: one packet, one round trip."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Counting.sent += 1
        super().send_packed_command(command, check_health)


def commands(client: redis.Redis) -> int:
    """The commands the server ran, INFO commandstats's count (the INFO calls left out)."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))


def tasks() -> dict[str, Any]:
    """One Celery task per mode, on testproject's app, the plain one undecorated."""
    from django_redis_lock import unique
    from testproject.celery import app

    def body(key: str) -> None:
        """Never runs: no worker."""

    made = {"plain .delay()": app.task(name="bench.plain")(body)}
    modes: dict[str, dict[str, Any]] = {
        'until="executed" (default)': {},
        'until="executing"': {"until": "executing"},
        'until="window", window=60': {"until": "window", "window": 60},
        'on_duplicate="replace"': {"on_duplicate": "replace"},
        "keep_after_success=300": {"keep_after_success": 300},
    }
    for index, (mode, options) in enumerate(modes.items()):
        made[mode] = unique("k:{key}", **options)(app.task(name=f"bench.unique{index}")(body))
    return made


def measure(task: Any, count: int, duplicate: bool, locks: redis.Redis) -> tuple[float, ...]:
    """µs, round trips and commands per enqueue of ``count`` enqueues of ``task``."""
    keys = [uuid.uuid4().hex for _ in range(count)]
    if duplicate:
        for key in keys:
            task.delay(key)
    sent, ran = Counting.sent, commands(locks)
    started = time.perf_counter()
    for key in keys:
        task.delay(key)
    elapsed = time.perf_counter() - started
    trips, done = Counting.sent - sent, commands(locks) - ran
    return elapsed / count * 1e6, trips / count, done / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="enqueues per round")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    from testproject.redis_server import RedisServer, find_redis_server

    broker = RedisServer(binary=find_redis_server()).start()
    os.environ["CELERY_BROKER_URL"] = broker.url
    os.environ["CELERY_RESULT_BACKEND"] = broker.url.replace("/0", "/1")
    from bench.rounds import own_redis

    try:
        with own_redis() as url:
            rows = run(url, broker, options.count, options.repeats)
    finally:
        broker.stop()
    print(table(rows))


def run(url: str, broker: Any, count: int, repeats: int) -> list[list[str]]:
    from django.conf import settings
    from django.test.utils import override_settings

    caches = {alias: dict(conf) for alias, conf in settings.CACHES.items()}
    options = dict(caches["default"]["OPTIONS"])
    options["CONNECTION_POOL_KWARGS"] = {"connection_class": Counting}
    caches["default"]["OPTIONS"] = options
    locks = redis.Redis.from_url(url)
    made = tasks()
    figures: dict[tuple[str, bool], list[tuple[float, ...]]] = {}
    with override_settings(CACHES=caches):
        for task in made.values():  # connections made outside the clock
            task.delay("warm")
        for _ in range(repeats):
            rounds: dict[tuple[str, bool], list[tuple[float, ...]]] = {}
            for round_ in range(ROUNDS):
                cases = list(itertools.product(made, (False, True)))
                for mode, duplicate in cases if round_ % 2 == 0 else reversed(cases):
                    seen = measure(made[mode], count, duplicate, locks)
                    rounds.setdefault((mode, duplicate), []).append(seen)
                redis.Redis.from_url(broker.url).flushall()  # the queue, not the locks
            for case, seen in rounds.items():
                figures.setdefault(case, []).append(_median(seen))
    plain = _median(figures["plain .delay()", False])
    rows = []
    for mode in made:
        new, dup = _median(figures[mode, False]), _median(figures[mode, True])
        rows.append(
            [
                mode,
                f"{new[0]:.0f}",
                f"{new[0] - plain[0]:+.0f}",
                f"{new[1]:.2f}",
                f"{new[2]:.2f}",
                f"{dup[0]:.0f}",
                f"{dup[1]:.2f}",
            ]
        )
    return rows


def _median(seen: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(statistics.median(column) for column in zip(*seen, strict=True))


HEADER = ["mode", "µs/enqueue", "vs plain", "round trips", "commands", "dup. µs", "dup. trips"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(HEADER, *rows, strict=False)]
    lines = [HEADER, ["-" * width for width in widths], *rows]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )


if __name__ == "__main__":
    main()
