"""What REDIS_LOCK["WAIT_REPLICAS"] costs: uncontended cycles with and without WAIT.

    python3 dev.py bench replicas [--cycles 5000] [--repeats 3]

Starts its own primary with one replica (both on loopback, so the replica's acknowledgement
comes back quickly: across machines add the network's round trip), then times
``with lock(name): pass`` with WAIT_REPLICAS 0 and 1 in interleaved rounds, and a bare
pipelined ``SET`` + ``WAIT 1`` as the floor of an acknowledged write. Medians of the repeats.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import command_line, interleaved, lock_cycle, setup_django  # noqa: E402

from testproject.redis_server import RedisServerGroup, find_redis_server  # noqa: E402

WAIT_TIMEOUT = 1.0


def _acked_write(url: str) -> Callable[[int], float]:
    import redis

    client = redis.Redis.from_url(url)

    def timed(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            pipe = client.pipeline(transaction=False)
            pipe.set("replicas:floor", "x", px=30_000)
            pipe.execute_command("WAIT", 1, int(WAIT_TIMEOUT * 1000))
            pipe.execute()
        return (time.perf_counter() - started) / count * 1e6

    return timed


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as README-ready sentences."""
    group = RedisServerGroup(binary=find_redis_server())
    setup_django()
    from django.test.utils import override_settings

    from testproject.settings import build_caches

    try:
        primary = group()
        group.replica(primary)
        with override_settings(CACHES=build_caches(primary.url)):
            timers = {
                str(needed): lock_cycle(
                    {"WAIT_REPLICAS": needed, "WAIT_TIMEOUT": WAIT_TIMEOUT}, "replicas:cycle"
                )
                for needed in (0, 1)
            }
            found = interleaved({**timers, "floor": _acked_write(primary.url)}, cycles, repeats)
    finally:
        group.stop_all()
    without, with_wait, floor = (found[name] for name in ("0", "1", "floor"))
    return [
        f"uncontended acquire + release on a primary with one replica: {without:.0f} µs with "
        f"``WAIT_REPLICAS = 0``, {with_wait:.0f} µs with ``WAIT_REPLICAS = 1`` "
        f"(+{(with_wait / without - 1) * 100:.0f} %, the replica's acknowledgement of the grant; "
        "still two round trips per cycle: ``WAIT`` is pipelined with the acquire script)",
        f"a bare ``SET`` + ``WAIT 1`` pipeline on the same servers: {floor:.0f} µs",
        "a hand-over costs its new holder one more round trip with ``WAIT_REPLICAS``: it "
        "confirms the grant, acknowledged, before it holds the lock",
    ]


if __name__ == "__main__":
    command_line(measure, __doc__ or "")
