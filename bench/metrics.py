"""What metrics cost: the uncontended cycle with REDIS_LOCK["METRICS"] off and on, in
interleaved rounds of one run.

    python3 dev.py bench metrics [--cycles 5000] [--repeats 3]

Starts its own Redis. "on" reports to Prometheus (prometheus_client's default registry) and
through the OpenTelemetry API as installed with the package's extras (no SDK configured: the
API's no-op tracer and meter, as in a project that has not set up OpenTelemetry).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import command_line, interleaved, lock_cycle, own_redis  # noqa: E402


def measure(cycles: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/benchmarks.rst."""
    with own_redis():
        from django.test.utils import override_settings

        from django_redis_lock.metrics import observers

        timers = {
            "off": lock_cycle({"METRICS": False}, "bench:metrics:off"),
            "off again": lock_cycle({"METRICS": False}, "bench:metrics:off2"),
            "on": lock_cycle({"METRICS": True}, "bench:metrics:on"),
        }
        found = interleaved(timers, cycles, repeats)
        with override_settings(REDIS_LOCK={"METRICS": True}):
            exporters = ", ".join(type(each).__name__ for each in observers()) or "none"
    off, again, on = found["off"], found["off again"], found["on"]
    return [
        f"uncontended cycle (acquire + release): metrics off {off:.0f} µs, on {on:.0f} µs "
        f"({on / off:.3f}x; observers: {exporters}); off again, the same run's noise: "
        f"{again:.0f} µs ({again / off:.3f}x)",
    ]


if __name__ == "__main__":
    command_line(measure, __doc__ or "")
