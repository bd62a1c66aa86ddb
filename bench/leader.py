"""How long a leadership takes to move between ``manage.py locks lead`` supervisors.

    python3 dev.py bench leader [--runs 10]

Starts its own Redis. Two supervisors of one name, each in a process group of its own, run a
command that reports when it started (its first statement, CLOCK_MONOTONIC: one clock for the
machine) and its epoch through a FIFO. Once one leads and the other waits in the queue, the
leading one is struck: SIGKILL of its group (failover: the follower waits out the lease, which
the last renewal, at most a third of the lease before the kill, set), or SIGTERM (hand-over: it
stops its child and resigns). The figure is the time from the strike to the start of the
follower's child; a fresh supervisor then queues behind the new leader, and the next run
strikes that one. Median and longest over the runs, for a 1 s and a 3 s lease after a SIGKILL
and a 30 s lease at a hand-over.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rounds import setup_django  # noqa: E402

from testproject.redis_server import RedisServer, die_with_parent, find_redis_server  # noqa: E402

NAME = "bench:leader"
WAIT = 30.0  # the longest any step may take (a supervisor starts Django first)
# The command: its start and epoch to the FIFO, then it waits until SIGTERM (or SIGKILL).
CHILD = textwrap.dedent(
    """
    import time
    started = time.monotonic()
    import os, signal, sys
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd = os.open(sys.argv[1], os.O_WRONLY)
    os.write(fd, f"{started} {os.environ['DJANGO_REDIS_LOCK_EPOCH']}\\n".encode())
    os.close(fd)
    while True:
        signal.pause()
    """
)
CASES = (("SIGKILL", 1.0), ("SIGKILL", 3.0), ("SIGTERM", 30.0))


class Bench:
    """The supervisors of one case, and the FIFO their children report on."""

    def __init__(self, url: str, fifo: Path, lease: float) -> None:
        self.url, self.fifo, self.lease = url, fifo, lease
        self.reader = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # RDWR: never an EOF
        self.buffer = b""
        self.started: list[subprocess.Popen[bytes]] = []

    def close(self) -> None:
        """SIGKILL every group started, and close the FIFO."""
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        os.close(self.reader)

    def supervise(self) -> subprocess.Popen[bytes]:
        """Start a supervisor of NAME, in a group of its own."""
        lead = ["locks", "lead", NAME, "--timeout", f"{self.lease:g}", "--grace", "5"]
        child = [sys.executable, "-c", CHILD, str(self.fifo)]
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *lead, "--", *child],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "testproject.settings",
                "REDIS_URL": self.url,
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self.started.append(process)
        return process

    def next_start(self) -> tuple[float, int]:
        """When the next child started, and its epoch (bounded: RuntimeError after WAIT)."""
        deadline = time.monotonic() + WAIT
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reader], [], [], left)[0]:
                raise RuntimeError(f"no child started in {WAIT:g} s")
            self.buffer += os.read(self.reader, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        started, epoch = line.split()
        return float(started), int(epoch)

    def queued(self) -> None:
        """Until a follower waits in NAME's queue (bounded; no event says "queued")."""
        import redis

        from django_redis_lock.runtime import runtime

        client = redis.Redis.from_url(self.url)
        queue = runtime().for_locks(None).keys_for("leader:" + NAME).queue
        deadline = time.monotonic() + WAIT
        while not client.zcard(queue):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no follower queued in {WAIT:g} s")
            time.sleep(0.01)


def measure(url: str, directory: Path, strike: str, lease: float, runs: int) -> list[float]:
    """The takeover times (seconds) of ``runs`` strikes with ``strike`` under ``lease``."""
    fifo = directory / f"starts-{strike}-{lease:g}"
    os.mkfifo(fifo)
    bench = Bench(url, fifo, lease)
    found = []
    try:
        leading = bench.supervise()
        bench.next_start()
        for _ in range(runs):
            follower = bench.supervise()
            bench.queued()
            struck = time.monotonic()
            if strike == "SIGKILL":
                os.killpg(leading.pid, signal.SIGKILL)  # the orphan too: it plays no part
            else:
                os.kill(leading.pid, signal.SIGTERM)
            started, _ = bench.next_start()
            found.append(started - struck)
            leading.wait(timeout=WAIT)
            leading = follower
    finally:
        bench.close()
    return found


def main() -> None:
    """Measure every case; print a row each."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="strikes per case")
    runs = parser.parse_args().runs
    setup_django()
    server = RedisServer(binary=find_redis_server()).start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-leader-") as name:
            for strike, lease in CASES:
                times = measure(server.url, Path(name), strike, lease, runs)
                if strike == "SIGKILL":
                    what, bound = "failover after a SIGKILL", lease + lease / 3
                else:
                    what, bound = "hand-over on SIGTERM", 1.0
                print(
                    f"- {what}, lease {lease:g} s: the follower's child started "
                    f"{statistics.median(times):.2f} s after (median), {max(times):.2f} s at "
                    f"most, over {len(times)} runs (bound {bound:.2f} s)"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
