"""django_redis_lock against its peers, side by side in one run, on a Redis it starts itself.

    python3 dev.py bench peers [--cycles 5000] [--contended 100] [--repeats 3] [--write]

Libraries: a raw floor (SET NX PX, then one EVALSHA compare-and-delete), redis-py's Lock,
python-redis-lock, pottery's Redlock (one master) and django_redis_lock, each with its
defaults. Every repeat runs them all, in an order rotated from one repeat to the next; the
tables give the medians of the repeats.

- uncontended: acquire + release cycles on one free lock: cycles/s, µs per cycle, and round
  trips per cycle (from the server's ``total_reads_processed``);
- contended: 4 processes x ``--contended`` cycles on one lock, each holding it for a
  non-atomic read-modify-write of a counter (which must come out exact). The handoff gap is
  the time from a holder calling ``release()`` to a waiting process's ``acquire()``
  returning, in µs and in round trips (a measured ``PING``); acquire waits p50/p99/max; and
  the Redis commands clients send per acquisition (read with MONITOR in a separate pass, script
  internals not counted);
- the ``@locked`` overhead on a view, Redis memory per held lock, (from bench/listing.py)
  ``locks list`` and the admin's first page with 100,000 held locks, and (from
  bench/replicas.py) what ``WAIT_REPLICAS = 1`` adds to a cycle, (from bench/cluster.py)
  the cycle and the handoff gap on a Redis Cluster, (from bench/quorum.py) quorum locks
  of 3 and 5 primaries beside pottery's Redlock, and (from bench/stats.py) what recording
  lock statistics costs.

``--write`` writes docs/benchmarks.rst and docs/benchmarks.png.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import multiprocessing
import os
import platform
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ.setdefault("TESTPROJECT_DB", ":memory:")

from testproject.redis_server import RedisServer, find_redis_server  # noqa: E402

PROCESSES = 4
LOCK_TIMEOUT = 30
# Contended cycles each process runs before the measured ones.
WARM_UP_CYCLES = 10


# -- the libraries, each behind the same two calls --------------------------------------------


class Handle:
    """One lock of one library: acquire() blocks until held, release() gives it back."""

    def acquire(self) -> bool:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


@dataclass
class Library:
    """How to make locks of one library in the current process."""

    name: str
    contended: bool
    make: Callable[[str, str], Callable[[str], Handle]]  # (url, ...) -> factory(name)


def _raw(url: str, _: str) -> Callable[[str], Handle]:
    import redis

    client = redis.Redis.from_url(url)
    release = client.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0"
    )

    class Raw(Handle):
        def __init__(self, name: str) -> None:
            self.name, self.token = name, os.urandom(16).hex()

        def acquire(self) -> bool:
            return bool(client.set(self.name, self.token, nx=True, px=LOCK_TIMEOUT * 1000))

        def release(self) -> None:
            release(keys=[self.name], args=[self.token])

    return Raw


def _metadata_floor(url: str, _: str) -> Callable[[str], Handle]:
    """The raw floor plus only what DESIGN.md has every lock store: a hash with the secret, a
    fencing token from the server clock, owner, label and start time. No queue, no checks."""
    import redis

    client = redis.Redis.from_url(url)
    acquire = client.register_script(
        """
        if redis.call('HEXISTS', KEYS[1], 's') == 1 then return 0 end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local token = math.max(tonumber(redis.call('HGET', KEYS[1], 't') or '0') + 1, now)
        redis.call('HSET', KEYS[1], 's', ARGV[1], 't', string.format('%d', token),
                   'o', ARGV[3], 'l', ARGV[4], 'a', string.format('%d', now))
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return 1
        """
    )
    release = client.register_script(
        """
        if redis.call('HGET', KEYS[1], 's') ~= ARGV[1] then return 0 end
        redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
        redis.call('PEXPIRE', KEYS[1], 60000)
        return 1
        """
    )
    owner = f"{socket.gethostname()} pid {os.getpid()} thread MainThread"

    class MetadataFloor(Handle):
        def __init__(self, name: str) -> None:
            self.name, self.token = f"meta:{name}", os.urandom(16).hex()

        def acquire(self) -> bool:
            args = [self.token, LOCK_TIMEOUT * 1000, owner, ""]
            return bool(acquire(keys=[self.name], args=args))

        def release(self) -> None:
            release(keys=[self.name], args=[self.token])

    return MetadataFloor


def _redis_py(url: str, _: str) -> Callable[[str], Handle]:
    import redis

    client = redis.Redis.from_url(url)
    return lambda name: client.lock(name, timeout=LOCK_TIMEOUT)  # type: ignore[return-value]


def _python_redis_lock(url: str, _: str) -> Callable[[str], Handle]:
    import redis
    import redis_lock

    client = redis.Redis.from_url(url)
    return lambda name: redis_lock.Lock(client, name, expire=LOCK_TIMEOUT)  # type: ignore[return-value]


def _pottery(url: str, _: str) -> Callable[[str], Handle]:
    import redis
    from pottery import Redlock

    client = redis.Redis.from_url(url)
    return lambda name: Redlock(  # type: ignore[return-value]
        key=name, masters={client}, auto_release_time=LOCK_TIMEOUT
    )


def _ours(url: str, _: str) -> Callable[[str], Handle]:
    import django

    django.setup()
    from django_redis_lock import lock

    return lambda name: lock(name, timeout=LOCK_TIMEOUT)  # type: ignore[return-value]


LIBRARIES = [
    Library("raw floor", False, _raw),
    Library("metadata floor", False, _metadata_floor),
    Library("redis-py Lock", True, _redis_py),
    Library("python-redis-lock", True, _python_redis_lock),
    Library("pottery Redlock", True, _pottery),
    Library("django_redis_lock", True, _ours),
]


# -- measuring ---------------------------------------------------------------------------------


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def reads(url: str) -> int:
    return int(_client(url).info("stats")["total_reads_processed"])


def ping_seconds(url: str, count: int = 2000) -> float:
    """Median round trip of a PING from Python: the unit gaps are counted in."""
    client = _client(url)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@dataclass
class Uncontended:
    micros: float
    trips: float


# Uncontended cycles run in interleaved rounds of this many per library, so that drift in the
# machine's speed (other tenants, CPU frequency) falls on all libraries alike.
ROUND_CYCLES = 250


def uncontended_all(libraries: list[Library], url: str, cycles: int) -> dict[str, Uncontended]:
    """Each library's median µs per cycle (timed one by one) and round trips per cycle."""
    factories = {library.name: library.make(url, "") for library in libraries}
    for make in factories.values():  # warm up: connections, scripts, imports
        for _ in range(200):
            handle = make("uncontended")
            handle.acquire()
            handle.release()
    times: dict[str, list[float]] = {name: [] for name in factories}
    trips: dict[str, list[float]] = {name: [] for name in factories}
    for _ in range(max(1, cycles // ROUND_CYCLES)):
        for name, make in factories.items():
            before = reads(url)
            for _ in range(ROUND_CYCLES):
                started = time.perf_counter()
                handle = make("uncontended")
                handle.acquire()
                handle.release()
                times[name].append(time.perf_counter() - started)
            trips[name].append((reads(url) - before - 1) / ROUND_CYCLES)  # less the INFO
    return {
        name: Uncontended(statistics.median(times[name]) * 1e6, statistics.median(trips[name]))
        for name in factories
    }


def _contender(library: Library, url: str, cycles: int, barrier: Any, out: Any) -> None:
    make = library.make(url, "")
    client = _client(url)
    records = []
    barrier.wait()
    for _ in range(WARM_UP_CYCLES):  # steady state: connections, scripts, wake-up channels
        handle = make("contended")
        handle.acquire()
        handle.release()
    barrier.wait()
    for _ in range(cycles):
        handle = make("contended")
        called = time.perf_counter()
        handle.acquire()
        acquired = time.perf_counter()
        value = int(client.get("counter") or 0)  # read ...
        client.set("counter", value + 1)  # ... modify, write: exact only under the lock
        releasing = time.perf_counter()
        handle.release()
        records.append((called, acquired, releasing))
    out.send(records)
    out.close()


@dataclass
class Contended:
    gap_p50: float
    gap_p90: float
    wait_p50: float
    wait_p99: float
    wait_max: float
    exact: bool


def contended(library: Library, url: str, cycles: int) -> Contended:
    """4 processes fighting for one lock; time.perf_counter is one clock for all on Linux."""
    _client(url).delete("counter")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    pipes, processes = [], []
    for _ in range(PROCESSES):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_contender, args=(library, url, cycles, barrier, send))
        process.start()
        pipes.append(receive)
        processes.append(process)
    records = [record for pipe in pipes for record in pipe.recv()]
    # The counter counts only measured cycles: the warm-up does not touch it.
    for process in processes:
        process.join(60)
    exact = int(_client(url).get("counter") or 0) == PROCESSES * cycles
    holds = sorted(records, key=lambda record: record[1])
    gaps = [
        nxt[1] - prev[2]
        for prev, nxt in itertools.pairwise(holds)
        if nxt[0] < prev[2]  # the next holder was already waiting: a handoff
    ]
    waits = sorted(acquired - called for called, acquired, _ in records)
    return Contended(
        gap_p50=_quantile(gaps, 0.5) * 1e6,
        gap_p90=_quantile(gaps, 0.9) * 1e6,
        wait_p50=_quantile(waits, 0.5) * 1e6,
        wait_p99=_quantile(waits, 0.99) * 1e6,
        wait_max=max(waits) * 1e6,
        exact=exact,
    )


# Publishes the wake-up floor times; each after the subscriber is back in its read and idle.
WAKE_UP_SAMPLES = 300
WAKE_UP_IDLE_SECONDS = 0.002  # about a contended wait here: the subscriber sleeps, as waiters do


def _subscriber(url: str, count: int, ready: Any, out: Any) -> None:
    connection = _client(url).connection_pool.get_connection()
    connection.send_command("SUBSCRIBE", "bench:wake")
    connection.read_response(push_request=True)
    heard = []
    for _ in range(count):
        ready.send(None)
        connection.read_response(push_request=True)
        heard.append(time.perf_counter())
    out.send(heard)


def wake_up_floor(url: str, count: int = WAKE_UP_SAMPLES) -> float:
    """Median µs from a PUBLISH call in one process to another process, blocked reading its
    subscription, having the message: what any wake-up through Redis costs at the least."""
    client = _client(url)
    context = multiprocessing.get_context("fork")
    ready_in, ready_out = context.Pipe(duplex=False)
    heard_in, heard_out = context.Pipe(duplex=False)
    process = context.Process(target=_subscriber, args=(url, count, ready_out, heard_out))
    process.start()
    sent = []
    for _ in range(count):
        ready_in.recv()
        time.sleep(WAKE_UP_IDLE_SECONDS)
        sent.append(time.perf_counter())
        client.publish("bench:wake", "x")
    heard = heard_in.recv()
    process.join(60)
    return statistics.median(got - at for at, got in zip(sent, heard, strict=True)) * 1e6


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Monitor:
    """Counts the commands clients send (MONITOR lines not from a script) on a raw socket."""

    def __init__(self, host: str, port: int) -> None:
        self._sock = socket.create_connection((host, port))
        self._sock.sendall(b"MONITOR\r\n")
        self.commands = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            self.commands += sum(
                1 for line in lines if line.startswith(b"+1") and b" lua]" not in line
            )

    def close(self) -> int:
        time.sleep(0.2)  # let the last lines arrive (measurement only)
        self._sock.close()
        self._thread.join(5)
        return self.commands


def commands_per_acquisition(library: Library, server: RedisServer, cycles: int) -> float:
    """Client commands per contended acquire + release, less the counter's GET and SET."""
    monitor = Monitor(server.host, server.port)
    contended(library, server.url, cycles)
    sent = monitor.close()
    measured = PROCESSES * cycles
    acquisitions = PROCESSES * (cycles + WARM_UP_CYCLES)
    # Less the counter's GET and SET of each measured cycle; connection set-up (HELLO,
    # CLIENT SETINFO, SUBSCRIBE) and the bench's own DEL and GET stay in, spread thin.
    return (sent - 2 * measured) / acquisitions


def view_overhead(url: str, count: int = 3000) -> tuple[float, float, float]:
    """µs a @locked view takes more than the same view undecorated, that in PING round
    trips, and what it adds beyond a bare acquire + release (the decorator's own work)."""
    import django

    django.setup()
    from django.http import HttpResponse
    from django.test import RequestFactory

    from django_redis_lock import locked

    def plain(request: Any, pk: int) -> HttpResponse:
        return HttpResponse("ok")

    decorated = locked("view:{pk}")(plain)
    request = RequestFactory().get("/view/1/")
    results = {}
    for name, view in (("plain", plain), ("locked", decorated)):
        for _ in range(200):
            view(request, pk=1)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            view(request, pk=1)
            times.append(time.perf_counter() - started)
        results[name] = statistics.median(times)
    from django_redis_lock import lock

    times = []
    for _ in range(count):
        started = time.perf_counter()
        with lock("view:bare"):
            pass
        times.append(time.perf_counter() - started)
    overhead = results["locked"] - results["plain"]
    own = overhead - statistics.median(times)
    return overhead * 1e6, overhead / ping_seconds(url), own * 1e6


def memory_per_lock(url: str) -> dict[str, int]:
    """Bytes of Redis memory (MEMORY USAGE) per held lock, by library."""
    client = _client(url)
    sizes = {}
    for library in LIBRARIES:
        client.flushall()
        handle = library.make(url, "")("memory:job-42")
        handle.acquire()
        sizes[library.name] = sum(
            client.memory_usage(key) or 0 for key in client.scan_iter(count=100)
        )
        handle.release()
    return sizes


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Results:
    ping: list[float] = field(default_factory=list)
    wake_up: list[float] = field(default_factory=list)
    uncontended: dict[str, list[Uncontended]] = field(default_factory=dict)
    contended: dict[str, list[Contended]] = field(default_factory=dict)
    commands: dict[str, float] = field(default_factory=dict)


def run(options: argparse.Namespace, server: RedisServer) -> Results:
    results = Results()
    for repeat in range(options.repeats):
        order = LIBRARIES[repeat % len(LIBRARIES) :] + LIBRARIES[: repeat % len(LIBRARIES)]
        results.ping.append(ping_seconds(server.url))
        results.wake_up.append(wake_up_floor(server.url))
        _client(server.url).flushall()
        print(f"repeat {repeat + 1}: uncontended", file=sys.stderr, flush=True)
        for name, outcome in uncontended_all(order, server.url, options.cycles).items():
            results.uncontended.setdefault(name, []).append(outcome)
        for library in order:
            _client(server.url).flushall()
            print(f"repeat {repeat + 1}: {library.name}", file=sys.stderr, flush=True)
            if library.contended:
                outcome = contended(library, server.url, options.contended)
                if not outcome.exact:
                    raise SystemExit(f"{library.name}: the counter is wrong: no mutual exclusion")
                results.contended.setdefault(library.name, []).append(outcome)
    for library in LIBRARIES:
        if library.contended:
            _client(server.url).flushall()
            results.commands[library.name] = commands_per_acquisition(library, server, 30)
    return results


def _median(values: list[float]) -> float:
    return statistics.median(values)


def tables(results: Results, view: tuple[float, float, float], memory: dict[str, int]) -> str:
    rtt = _median(results.ping)
    floor = _median([u.micros for u in results.uncontended["raw floor"]])
    lines = [
        "Uncontended acquire + release",
        "-----------------------------",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - Library",
        "     - cycles/s",
        "     - µs per cycle",
        "     - vs raw floor",
        "     - round trips per cycle",
    ]
    for library in LIBRARIES:
        runs = results.uncontended[library.name]
        micros = _median([u.micros for u in runs])
        lines += [
            f"   * - {library.name}",
            f"     - {1e6 / micros:,.0f}",
            f"     - {micros:.0f}",
            f"     - {micros / floor:.2f}x",
            f"     - {_median([u.trips for u in runs]):.2f}",
        ]
    title = (
        f"Contended: {PROCESSES} processes, one lock (one round trip, a PING from Python, is "
        f"{rtt * 1e6:.0f} µs here)"
    )
    lines += [
        "",
        title,
        "-" * len(title),
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - Library",
        "     - handoff gap p50",
        "     - gap p90",
        "     - gap p50 in round trips",
        "     - acquire wait p50 / p99 / max (ms)",
        "     - worst wait / median wait",
        "     - commands per acquisition",
    ]
    for library in LIBRARIES:
        if not library.contended:
            continue
        runs = results.contended[library.name]
        gap50 = _median([c.gap_p50 for c in runs])
        gap90 = _median([c.gap_p90 for c in runs])
        w50 = _median([c.wait_p50 for c in runs])
        w99 = _median([c.wait_p99 for c in runs])
        wmax = _median([c.wait_max for c in runs])
        lines += [
            f"   * - {library.name}",
            f"     - {gap50:,.0f} µs",
            f"     - {gap90:,.0f} µs",
            f"     - {gap50 / (rtt * 1e6):.2f}",
            f"     - {w50 / 1000:.1f} / {w99 / 1000:.1f} / {wmax / 1000:.1f}",
            f"     - {wmax / w50:.1f}x",
            f"     - {results.commands[library.name]:.2f}",
        ]
    wake_up = _median(results.wake_up)
    lines += [
        "",
        f"The wake-up floor: from a ``PUBLISH`` call in one process to another process, idle in "
        f"a read of its subscription, having the message: {wake_up:,.0f} µs, "
        f"{wake_up / (rtt * 1e6):.2f} round trips. A hand-over through Redis cannot be quicker; "
        "django_redis_lock's release runs a script before it publishes, and the waiting "
        "process then wakes the waiting thread.",
    ]
    lines += [
        "",
        "The ``@locked`` view and Redis memory",
        "-------------------------------------",
        "",
        f"- ``@locked`` adds {view[0]:.0f} µs to a view: its two round trips (one acquire, one "
        f"release; {view[1]:.2f} PINGs' worth, as scripts take longer than PING) and "
        f"{view[2]:.0f} µs of its own work (the name, the label) beyond a bare ``with lock()``.",
        "- Redis memory per held lock (``MEMORY USAGE`` of its keys, a 30-character owner and a "
        "label for django_redis_lock): "
        + ", ".join(f"{name} {size} B" for name, size in memory.items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def targets(results: Results, listing_rows: list[str]) -> str:
    """DESIGN.md section 5, each target against this run."""
    rtt = _median(results.ping) * 1e6
    floor = _median([u.micros for u in results.uncontended["raw floor"]])
    ours_u = results.uncontended["django_redis_lock"]
    ours_c = results.contended["django_redis_lock"]
    ratio = _median([u.micros for u in ours_u]) / floor
    trips = _median([u.trips for u in ours_u])
    gap = _median([c.gap_p50 for c in ours_c]) / rtt
    spread = _median([c.wait_max for c in ours_c]) / _median([c.wait_p50 for c in ours_c])
    commands = results.commands["django_redis_lock"]

    def row(target: str, value: str, met: bool) -> list[str]:
        return [f"   * - {target}", f"     - {value}", f"     - {'met' if met else 'missed'}"]

    lines = [
        "Targets",
        "-------",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - Target (DESIGN.md section 5)",
        "     - This run",
        "     - ",
        *row("uncontended cycle within 1.10x of the raw floor", f"{ratio:.2f}x", ratio <= 1.1),
        # A few reads a second come from elsewhere (health checks): 2.05 still means 2.
        *row("2 round trips per uncontended cycle", f"{trips:.2f}", trips < 2.05),
        *row("handoff gap p50 at most 1.5 round trips", f"{gap:.2f}", gap <= 1.5),
        *row("worst wait at most 5x the median wait", f"{spread:.1f}x", spread <= 5),
        *row(
            "at most 1 command per acquisition beyond acquire + release",
            f"{commands:.2f} in all",
            commands <= 3.05,
        ),
        "",
        *[f"- {row_}" for row_ in listing_rows],
        "",
    ]
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [library.name for library in LIBRARIES]
    cycle = [_median([u.micros for u in results.uncontended[name]]) for name in names]
    contenders = [library.name for library in LIBRARIES if library.contended]
    gaps = [_median([c.gap_p50 for c in results.contended[name]]) for name in contenders]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = ["#2a9d8f" if name == "django_redis_lock" else "#8d99ae" for name in names]
    left.barh(names, cycle, color=colours)
    left.set_xlabel("µs per uncontended acquire + release (lower is better)")
    left.invert_yaxis()
    colours = ["#2a9d8f" if name == "django_redis_lock" else "#8d99ae" for name in contenders]
    right.barh(contenders, gaps, color=colours)
    right.set_xscale("log")
    right.set_xlabel("handoff gap p50, µs, log scale (lower is better)")
    right.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def versions() -> str:
    from importlib.metadata import version

    packages = ["django", "redis", "django-redis", "python-redis-lock", "pottery", "hiredis"]
    found = []
    for package in packages:
        try:
            found.append(f"{package} {version(package)}")
        except Exception:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000, help="uncontended cycles")
    parser.add_argument("--contended", type=int, default=200, help="cycles per process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--listing-locks", type=int, default=100_000)
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.*")
    options = parser.parse_args()

    server = RedisServer(binary=find_redis_server()).start()
    os.environ["REDIS_URL"] = server.url
    try:
        redis_version = _client(server.url).info("server")["redis_version"]
        results = run(options, server)
        _client(server.url).flushall()
        view = view_overhead(server.url)
        memory = memory_per_lock(server.url)
    finally:
        server.stop()
    import listing

    listing_rows = listing.measure(options.listing_locks, options.repeats)
    import replicas

    replica_rows = replicas.measure(options.cycles, options.repeats)
    import cluster

    cluster_rows = cluster.measure(options.cycles, options.repeats)
    import quorum

    quorum_rows, _ = quorum.measure(options.cycles, options.repeats)
    import stats

    stats_rows = stats.measure(options.cycles, options.repeats)
    body = tables(results, view, memory)
    machine = (
        f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}, "
        f"Redis {redis_version}; {versions()}; {datetime.date.today().isoformat()}"
    )
    text = "\n".join(
        [
            "==========",
            "Benchmarks",
            "==========",
            "",
            "Produced by ``python3 dev.py bench peers --write`` (bench/peers.py and",
            "bench/listing.py), which start their own ``redis-server`` and touch no other.",
            f"Medians of {options.repeats} repeats, the libraries' order rotated between",
            "repeats, every library with its defaults.",
            "",
            f"Machine: {machine}.",
            "",
            ".. image:: benchmarks.png",
            "   :alt: Per-library cycle time and contended handoff gap.",
            "",
            targets(results, listing_rows),
            body,
            "Operating locks at scale",
            "------------------------",
            "",
            *[f"- {row}" for row in listing_rows],
            "",
            "Replica acknowledgement (WAIT_REPLICAS)",
            "---------------------------------------",
            "",
            "From bench/replicas.py, on a primary and one replica of its own:",
            "",
            *[f"- {row}" for row in replica_rows],
            "",
            "Redis Cluster",
            "-------------",
            "",
            "From bench/cluster.py, on a cluster of its own (three primaries with a replica each):",
            "",
            *[f"- {row}" for row in cluster_rows],
            "",
            "Quorum locks (Redlock)",
            "----------------------",
            "",
            "From bench/quorum.py, on 5 primaries of its own:",
            "",
            *[f"- {row}" for row in quorum_rows],
            "",
            "Lock statistics (STATS)",
            "-----------------------",
            "",
            "From bench/stats.py, on a Redis of its own:",
            "",
            *[f"- {row}" for row in stats_rows],
            "",
            NOTES,
        ]
    )
    print(text)
    if options.write:
        (ROOT / "docs" / "benchmarks.rst").write_text(text)
        plot(results, ROOT / "docs" / "benchmarks.png")


NOTES = """Where the targets are missed or close, and why
----------------------------------------------

*Quorum of 3, at most 1.3x our own single-primary cycle (issue 13).* 1.38x in the run above
(1.33x to 1.38x over four runs of the final code; 1.60x with the first version, which took
each primary's connection from its pool and packed every command with the client's packer).
The three primaries' round trips overlap: each step is sent to every primary before any reply
is read, so a step waits about one round trip of the slowest. What does not overlap is the
client's own work per primary and step: a ``sendall`` and a ``recv`` system call and the
parsing of the reply, about 15 µs each step here, against a round trip of 67 µs on loopback;
the three servers and the client also share two cores. Across machines, where a round trip
costs hundreds of microseconds, that work weighs proportionally less and the ratio falls
toward 1. The quorum's steps take no connection from a pool (each thread keeps one per
primary) and pack each step's arguments once for all primaries. pottery pays 2.8x its own
single-primary cycle in the same run, and its single-primary cycle is 3.3x ours.

*Uncontended, 1.10x of the raw floor.* See the table above for this run (1.42x before the work
below). Runs of the same code on one machine differ by a few percent (1.01x to 1.11x over a
day's runs, with redis-py's Lock moving as much), so the target is met there, without a wide
margin. Machines differ more: on a slower one (a PING of about 120 µs, where another day's
took 60 µs) every library's ratio rose, the metadata floor and redis-py's Lock to 1.09x and
1.10x and django_redis_lock to 1.17x to 1.26x; there, four interleaved runs of the code before
the reshaping of the package (issue 9) against four of the reshaped code gave medians of
1.175x and 1.18x, and the handoff gap against python-redis-lock's in the same runs 0.96 and
0.94: the reshaping cost nothing measurable. The floor stores a random token;
django_redis_lock stores what DESIGN.md asks every held lock to carry: the holder's secret, a
fencing token from the server's clock, the owner, the label and the start time. The "metadata
floor" row is the raw floor plus exactly that and nothing else. Where the rest goes, measured
on this machine:

- In Redis (``INFO commandstats``): the floor's ``SET`` and compare-and-delete script take
  about 13 µs per cycle; django_redis_lock's two scripts about 36 µs (17 to 19 µs each: the
  hash with its five fields, ``TIME``, the expiry, the check for waiters). Each ``redis.call``
  from Lua costs about 2 µs here, whatever the command. The metadata floor pays the same.
- In Python (py-spy, and the same path with Redis calls stubbed out): redis-py's command path
  (connection pool, sending, parsing) is about three quarters of the client's CPU per cycle,
  for every library alike. django_redis_lock's own code (the Lock object, the acquire plan,
  the watchdog's bookkeeping, signals) is about 10 µs per cycle in a tight loop and costs two
  to three times that between real round trips, where the CPU's caches are cold. Our two
  scripts called alone, without that code, measure 1.02x to 1.04x.
- Fixed on the way: the watchdog thread was woken at every acquire (about 30 µs per cycle);
  a hold due a second or more later is now handed to the watchdog with a bare append and
  released with a flag (about 10 µs); scripts are sent with the client's ``execute_command``
  instead of redis-py's ``Script`` object (an import and several layers per call); a granted
  acquire is answered with one integer instead of an array (about 8 µs less to parse); acquire
  skips the look for waiters when a tombstone shows there are none; the scripts' fast paths
  run before any Lua helper is defined; settings, the tombstone time and the process part of
  the owner are read once.
- What would give margin, and why it is not done: sending the two scripts on a pooled
  connection directly (``send_command`` and ``read_response``, skipping ``execute_command``)
  measured 0.98x to 1.01x of the raw floor in an interleaved A/B run. It would also skip the
  client's retry policy, its reconnection handling and its observability hooks, which the
  project configures for its cache and which the lock must honour; a lock that behaves
  differently from its cache on a failover is not worth those 30 µs.

*Handoff gap, 1.5 round trips.* See the table above for this run, beside python-redis-lock,
which the target was set against (the gap was 2.67 round trips before the fixes below, when
python-redis-lock measured 2.48). The gap counts from the holder calling ``release()`` to the
waiting process's ``acquire()`` returning. It cannot reach 1.5 round trips on this machine
with a hand-over made atomically in Redis:

- The wake-up floor above is what any hand-over through Redis costs at the least: a
  ``PUBLISH`` reaching another, idle process. Waking a sleeping process here (a guest of a
  virtual machine, on 2 cores) costs as much as the network path or more: the floor has
  measured from 1.3 round trips (when a PING took about 150 µs) to 2 (when it took 60 µs),
  while staying near 125 µs.
- Redis delivers the grant only when the release script ends, and the script that hands the
  lock over (it reads the queue, writes the new holder, publishes) takes tens of µs in Redis
  (45 to 50 µs measured with ``SLOWLOG`` at a threshold of 0, on a slower day). The floor
  alone is already at or above 1.5 round trips.
- What is left beyond that: the waiting process's listener thread wakes the waiting thread
  (about 35 µs under this load), and the new hold is recorded.
  Letting the waiting thread read the channel itself when it is its process's only waiter
  would save that thread wake-up; it would not bring the gap under the floor plus the script.
- Fixed on the way: a hand-over woke a third process (the waiter behind, told when the new
  lease ends) at the moment the new holder's process needed a core; waiters behind the first
  now look again every 4 s, within the hand-over lease, and are told only when a lease is
  shorter than that (2.5 round trips to 2.0 in a 4-process run). A hand-over no longer makes
  the new holder lengthen its short hand-over lease at once (it does so at a third of it, like
  any renewal), so a short hold costs no request beyond acquire and release: 2.15 commands per
  acquisition, from 2.92. Waiters are woken through a bare lock instead of an Event.

Reading the numbers
-------------------

- Uncontended cycles are timed one by one, in interleaved rounds of every library, and the
  table gives medians: this machine's speed drifts by tens of percent over minutes, so runs of
  a whole library at a time were not comparable.
- Round trips per cycle come from the server's ``total_reads_processed``; commands per
  acquisition from ``MONITOR`` in a separate, untimed pass (commands a script runs inside
  Redis are not client commands and are not counted).
- The handoff gap is measured only where the next holder was already waiting when the holder
  called ``release()``. django_redis_lock hands the lock over inside the release script and
  publishes the grant, so the next holder runs about half a round trip later without a
  request of its own. redis-py's Lock polls (every 0.1 s by default) and pottery retries after
  a random delay, which their gaps and worst waits show; python-redis-lock wakes waiters with
  BLPOP and then races them.
"""


if __name__ == "__main__":
    main()
