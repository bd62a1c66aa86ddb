"""Operating locks at scale: `manage.py locks list --json`, the admin's first page, and the
statistics page.

    python3 dev.py bench listing [--locks 100000] [--repeats 3]

Starts its own redis-server, takes N real locks through the acquire script (pipelined, so the
setup is quick), then measures, medians over the repeats:

- `manage.py locks list --json` as a subprocess: wall time and peak memory (max RSS), at N and
  at N/10 (memory must not grow with the number of locks);
- the admin changelist's first page through Django's test client, logged in as a superuser
  (in-memory SQLite), at N locks;
- the admin's statistics page, sorted by busy answers, as a subprocess (its wall time includes
  Django's start, measured alone too) at N and N/10 lock names with statistics: its time and
  memory must not grow past the names it reads at most (admin.STATS_READ_LIMIT).

Targets (DESIGN.md section 5): list under 3 s, admin first page under 0.5 s, at 100,000 locks.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testproject.redis_server import RedisServer, find_redis_server  # noqa: E402

SETUP_BATCH = 2000


def take_locks(count: int, start: int = 0) -> None:
    """Hold ``count`` locks named bench:<i> for an hour, through the real acquire script."""
    from django_redis_lock.runtime import runtime

    backend = runtime().backend()
    backend.load("acquire")
    for first in range(start, start + count, SETUP_BATCH):
        pipe = backend.client.pipeline(transaction=False)
        for i in range(first, min(first + SETUP_BATCH, start + count)):
            keys = backend.keys_for(f"bench:{i:07}").all
            args = [f"secret-{i}", 3_600_000, f"bench-host pid {os.getpid()}", "bench", 0, "-", 0]
            backend.queue(pipe, "acquire", keys, args)
        pipe.execute()


def time_list(env: dict[str, str]) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of one `manage.py locks list --json`, output discarded."""
    command = [sys.executable, str(ROOT / "manage.py"), "locks", "list", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True, timeout=120)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before) / 1024


def time_admin_first_page(repeats: int) -> float:
    """Median seconds of the admin changelist's first page."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    client = Client()
    client.force_login(User.objects.create_superuser("bench", password="bench"))
    times = []
    for _ in range(repeats + 1):  # the first warms up templates and scripts
        started = time.perf_counter()
        response = client.get("/admin/django_redis_lock/lock/")
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return statistics.median(times[1:])


def record_stats(count: int, start: int = 0) -> None:
    """Statistics for ``count`` names stats:<i>, as their releases would have recorded them."""
    from django_redis_lock.runtime import runtime

    backend = runtime().backend()
    for first in range(start, start + count, SETUP_BATCH):
        pipe = backend.client.pipeline(transaction=False)
        for i in range(first, min(first + SETUP_BATCH, start + count)):
            stats = backend.keys_for(f"stats:{i:07}").stats
            pipe.hset(stats, mapping={"n": 3, "h5": 2, "h7": 1, "m": 40, "t": 30000, "b": i % 7})
        pipe.execute()


STATS_PAGE = """
import resource
import time
import django
django.setup()
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
client = Client()
client.force_login(User.objects.create_superuser("bench", password="bench"))
started = time.perf_counter()
if PAGE:
    response = client.get("/admin/django_redis_lock/lock/stats/", {"sort": "busy"})
    assert response.status_code == 200, response.status_code
print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def time_stats_page(env: dict[str, str], page: bool = True) -> tuple[float, float]:
    """The statistics page rendered once in a new process: (seconds of the page itself,
    peak RSS in MiB of that process); without ``page``, the process alone."""
    script = STATS_PAGE.replace("PAGE", str(page))
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    seconds, peak = done.stdout.split()
    return float(seconds), int(peak) / 1024


@dataclass
class Scale:
    """The figures the targets are read from."""

    small: int
    locks: int
    small_seconds: float
    seconds: float
    small_rss: float
    rss: float
    admin_seconds: float
    bytes_per_lock: float


def measure(locks: int, repeats: int) -> list[str]:
    """Rows for docs/benchmarks.rst (see measure_scale)."""
    return measure_scale(locks, repeats)[0]


def measure_scale(locks: int, repeats: int) -> tuple[list[str], Scale]:
    """The listing and admin figures at ``locks`` held locks, on a Redis of their own."""
    server = RedisServer(binary=find_redis_server()).start()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "TESTPROJECT_DB": ":memory:",
        "PYTHONPATH": str(ROOT),
    }
    for key in ("DJANGO_SETTINGS_MODULE", "TESTPROJECT_DB"):
        os.environ.setdefault(key, env[key])
    import django
    from django.test.utils import override_settings

    from testproject.settings import build_caches

    django.setup()
    try:
        with override_settings(CACHES=build_caches(server.url)):
            small = locks // 10
            used = redis_memory(server)
            take_locks(small)
            small_runs = [time_list(env) for _ in range(repeats)]
            take_locks(locks - small, start=small)
            per_lock = (redis_memory(server) - used) / locks
            big_runs = [time_list(env) for _ in range(repeats)]
            admin = time_admin_first_page(repeats)
            _, bare = time_stats_page(env, page=False)
            record_stats(small)
            small_stats = [time_stats_page(env) for _ in range(repeats)]
            record_stats(locks - small, start=small)
            big_stats = [time_stats_page(env) for _ in range(repeats)]
    finally:
        server.stop()
    rows = []
    for count, runs in ((small, small_runs), (locks, big_runs)):
        seconds = statistics.median(run[0] for run in runs)
        memory = max(run[1] for run in runs)
        rows.append(
            f"``locks list --json``, {count:,} locks: {seconds:.2f} s, max RSS {memory:.0f} MiB"
        )
    rows.append(f"admin first page, {locks:,} locks: {admin * 1000:.0f} ms")
    rows.append(
        f"Redis memory per held lock at {locks:,} locks (``used_memory``, before and after, "
        f"over the locks; a 21-character owner, a 5-character label): {per_lock:.0f} B"
    )
    for count, runs in ((small, small_stats), (locks, big_stats)):
        seconds = statistics.median(run[0] for run in runs)
        memory = max(run[1] for run in runs)
        rows.append(
            f"admin statistics page, {count:,} names: {seconds:.2f} s, max RSS {memory:.0f} MiB "
            f"(the process without the page: {bare:.0f} MiB)"
        )
    scale = Scale(
        small=small,
        locks=locks,
        small_seconds=statistics.median(run[0] for run in small_runs),
        seconds=statistics.median(run[0] for run in big_runs),
        small_rss=max(run[1] for run in small_runs),
        rss=max(run[1] for run in big_runs),
        admin_seconds=admin,
        bytes_per_lock=per_lock,
    )
    return rows, scale


def redis_memory(server: RedisServer) -> int:
    """The server's ``used_memory``, in bytes."""
    import redis

    return int(redis.Redis.from_url(server.url).info("memory")["used_memory"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print("\n".join(measure(options.locks, options.repeats)))


if __name__ == "__main__":
    main()
