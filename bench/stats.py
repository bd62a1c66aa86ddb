"""What recording lock statistics costs: uncontended cycles with REDIS_LOCK["STATS"] on and off.

    python3 dev.py bench stats [--cycles 5000] [--repeats 3]

Starts its own Redis, then times ``with lock(name): pass`` with statistics recorded (the
default) and not, in interleaved rounds of one run, the order swapped every round, and reads
the server's time per call of each script (``INFO commandstats`` of EVALSHA, which runs them).
Medians of the repeats. The budget (issue 14): at most 5 % more per cycle.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import command_line, interleaved, lock_cycle, setup_django  # noqa: E402

from testproject.redis_server import RedisServerGroup, find_redis_server  # noqa: E402

BUDGET = 1.05


def _server_micros(url: str, recording: bool, count: int) -> float:
    """The server's µs per EVALSHA (acquire and release alike) over ``count`` cycles."""
    import redis
    from django.test.utils import override_settings

    from django_redis_lock import lock

    client = redis.Redis.from_url(url)
    with override_settings(REDIS_LOCK={"STATS": recording}):
        with lock("stats:warm"):
            pass
        client.config_resetstat()
        for _ in range(count):
            with lock("stats:server"):
                pass
    found = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(found.get("usec_per_call", 0.0))


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/benchmarks.rst."""
    group = RedisServerGroup(binary=find_redis_server())
    setup_django()
    from django.test.utils import override_settings

    from testproject.settings import build_caches

    try:
        server = group()
        with override_settings(CACHES=build_caches(server.url)):
            timers = {
                "on": lock_cycle({"STATS": True}, "stats:cycle"),
                "off": lock_cycle({"STATS": False}, "stats:cycle"),
            }
            found = interleaved(timers, cycles, repeats)
            server_on = _server_micros(server.url, True, 2000)
            server_off = _server_micros(server.url, False, 2000)
    finally:
        group.stop_all()
    on, off = found["on"], found["off"]
    ratio = on / off
    verdict = "within" if ratio <= BUDGET else "over"
    return [
        f"uncontended acquire + release with statistics recorded (``STATS``, the default): "
        f"{on:.0f} µs, without: {off:.0f} µs: {(ratio - 1) * 100:+.1f} % ({verdict} the 5 % "
        "budget); the release script records the hold and the wait in the same round trip",
        f"the server's time per script call (acquire and release alike): {server_on:.1f} µs "
        f"recording, {server_off:.1f} µs not",
    ]


if __name__ == "__main__":
    command_line(measure, __doc__ or "")
