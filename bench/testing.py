"""What the test kit costs a test suite: the ``locks`` fixture's set-up and clean-up per test,
and the start of the shared server, once per session.

    python3 dev.py bench testing [--tests N] [--repeats R]

Writes a small project in a temporary directory and runs pytest on it (the kit's plugin, in a
process of its own): N trivial tests that each take and release a lock, once asking for the
``locks`` fixture and once for ``redis_lock_server`` alone (no clean-up after each test), the
variants taking turns. Hooks time each test's set-up and tear-down (the fixtures' work, and
pytest's own around it); the first test of a run, which starts the server, is left out. The
overhead is the difference of the two variants' mean per test; the figures are medians of the
repeats. The server's start
(``redis_server().start()``, until it answers) is timed apart. The target (issue 42): under
5 ms per test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUDGET_MS = 5.0
RUN_SECONDS = 600

CONFTEST = """\
import json
import os
import time

import pytest

pytest_plugins = ["django_redis_lock.testing.pytest"]
TIMES = {}


def _timed(item):
    started = time.perf_counter()
    try:
        yield
    finally:
        TIMES[item.nodeid] = TIMES.get(item.nodeid, 0.0) + time.perf_counter() - started


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _timed(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _timed(item))


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_TIMES"], "w") as file:
        json.dump(list(TIMES.values()), file)
"""

SETTINGS = """\
SECRET_KEY = "bench"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_redis_lock"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
"""

TESTS = """\
import pytest

from django_redis_lock import lock


@pytest.mark.parametrize("n", range({count}))
def test_one_lock({fixture}, n):
    with lock(f"bench:{{n}}"):
        pass
"""


def run(directory: Path, fixture: str, count: int) -> float:
    """Mean seconds of set-up and tear-down per test (the first left out) of one pytest run
    asking for ``fixture``."""
    (directory / "test_bench.py").write_text(TESTS.format(count=count, fixture=fixture))
    times = directory / "times.json"
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(directory), str(ROOT)]),
        DJANGO_SETTINGS_MODULE="settings",
        BENCH_TIMES=str(times),
    )
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "django"],
        cwd=directory,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=RUN_SECONDS,
    )
    found: list[float] = json.loads(times.read_text())
    assert len(found) == count, found
    return statistics.fmean(found[1:])


def server_start_ms(repeats: int) -> float:
    """The median time from ``redis_server().start()`` to a server answering, in ms."""
    from django_redis_lock.testing import redis_server

    seen = []
    for _ in range(repeats):
        server = redis_server()
        started = time.perf_counter()
        server.start()
        seen.append((time.perf_counter() - started) * 1e3)
        server.stop()
    return statistics.median(seen)


def measure(count: int, repeats: int) -> list[str]:
    """The figures, as sentences for docs/testing.rst and docs/performance.rst."""
    with tempfile.TemporaryDirectory(prefix="bench-testing-") as name:
        directory = Path(name)
        (directory / "pytest.ini").write_text("[pytest]\n")
        (directory / "conftest.py").write_text(CONFTEST)
        (directory / "settings.py").write_text(SETTINGS)
        with_locks, without = [], []
        for repeat in range(repeats):
            order = [("locks", with_locks), ("redis_lock_server", without)]
            for fixture, seen in order if repeat % 2 == 0 else reversed(order):
                seen.append(run(directory, fixture, count) * 1e3)
    used, bare = statistics.median(with_locks), statistics.median(without)
    overhead = used - bare
    verdict = "within" if overhead < BUDGET_MS else "over"
    start = server_start_ms(max(repeats, 5))
    return [
        f"the set-up and tear-down of a test asking for ``locks`` take {used:.2f} ms, of one "
        f"asking for the session's server alone {bare:.2f} ms ({count} tests taking one lock "
        f"each, medians of {repeats} runs): the fixture adds {overhead:.2f} ms per test "
        f"({verdict} the {BUDGET_MS:.0f} ms budget)",
        f"the shared server starts in {start:.0f} ms, once per test process",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tests", type=int, default=500, help="tests per pytest run")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    for row in measure(options.tests, options.repeats):
        print(f"- {row}")


if __name__ == "__main__":
    main()
