"""The unique-task scenarios: real Celery workers run @unique tasks (faults/unique_app.py) sent
by several producer processes (faults/unique_producer.py) while the workers are SIGKILLed.

Each scenario starts one redis-server (the locks on db 0, the broker on db 1, the records on
db 2), WORKERS Celery workers (solo pool, ``acks_late``, a short visibility timeout) and
PRODUCERS producers that enqueue the three tasks (``until="executed"``, a debounce, a
throttle) on KEYS keys, for a while; then it stops the producers, waits (bounded) until every
task sent was run or skipped, stops the workers, and waits for the keys to end. A killed
worker is started again at once. The faults:

- ``unique-worker-kill``: every KILL_EVERY seconds the controller SIGKILLs a worker, the one
  running a task when there is one (its task is delivered again once the visibility timeout
  has passed);
- ``unique-redelivery``: a share of the tasks are sent with ``kill=True``: their worker
  SIGKILLs itself once the task ran and the package freed its key, before Celery acknowledges
  it; the task is delivered again, by then usually beside a new task of its key.

The checker (:func:`check`) reads the records; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.scenarios import START_TIMEOUT, STOP_SLACK, wait_for
from faults.topologies import server_settings
from testproject.redis_server import RedisServer, die_with_parent, find_redis_server

ROOT = Path(__file__).resolve().parent.parent
PRODUCER = ROOT / "faults" / "unique_producer.py"
WORKERS = 3
PRODUCERS = 3
KEYS = 4
PAUSE = 0.05  # between two enqueues of a producer
KILL_EVERY = 1.5  # seconds between the controller's kills (unique-worker-kill)
KILL_SHARE = 0.04  # of the tasks sent with kill=True (unique-redelivery)
PLAY = 10.0  # seconds of enqueues per fault round (a long run plays three)
RUNNING_LEASE = 2.0  # REDIS_LOCK["TIMEOUT"] in the workers: a running task's key's lease
LEASE_SLACK = 1.0  # past a lease, for the monitor's look (every MONITOR s) on a shared machine
MONITOR = 0.2
DRAIN_TIMEOUT = 40.0  # for every task sent to be run or skipped (redeliveries included)
CLOCK_SLACK = 0.005  # Redis expires a key within a millisecond of its time


@dataclass(frozen=True)
class UniqueScenario:
    """One way of killing the workers of @unique tasks, and what the documentation promises."""

    name: str
    fault: str  # "worker-kill" or "redelivery"
    promise: str
    short: bool = False
    topology: str = "single"


UNIQUE_SCENARIOS = [
    UniqueScenario(
        "unique-worker-kill",
        "worker-kill",
        "never two runs of one key at once; a debounced task never runs after a later enqueue "
        "of its key that has not finished; the last enqueue of a debounced key runs; no two "
        "throttled tasks sent inside one window; a duplicate gets a task of its own key; a "
        "killed worker's key ends by its running lease",
    ),
    UniqueScenario(
        "unique-redelivery",
        "redelivery",
        "a task delivered again after its worker died before acknowledging it never runs "
        "beside another task of its key (it is skipped while the key names another), and all "
        "of the above",
    ),
]


@dataclass
class Run:
    """A record of faults/unique_app.py: a start, an end, a decision..."""

    kind: str
    at: float
    pid: int
    task_id: str
    task: str
    key: str
    extra: Any


@dataclass
class UniqueOutcome:
    scenario: UniqueScenario
    records: list[Run] = field(default_factory=list)
    kills: dict[int, float] = field(default_factory=dict)  # pid: when it was SIGKILLed
    held_past_lease: list[str] = field(default_factory=list)
    keys_left: list[str] = field(default_factory=list)
    drained: bool = True
    seconds: float = 0.0


class UniqueRun:
    """Plays one unique-task scenario."""

    def __init__(self, scenario: UniqueScenario, directory: Path, repeats: int) -> None:
        self.scenario, self.directory, self.repeats = scenario, directory, repeats
        self.outcome = UniqueOutcome(scenario)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.producers: list[subprocess.Popen[bytes]] = []
        self.seen = 0  # records read so far
        self.flagged: set[tuple[str, str]] = set()

    def play(self) -> UniqueOutcome:
        from django.test.utils import override_settings

        started = time.monotonic()
        server = RedisServer(binary=find_redis_server()).start()
        try:
            settings = server_settings(server.url, 1.0, 0)
            settings["REDIS_LOCK"] = {**settings["REDIS_LOCK"], "TIMEOUT": RUNNING_LEASE}
            base = server.url.rsplit("/", 1)[0]
            self.env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "faults.settings",
                "FAULTS_SETTINGS": json.dumps(settings),
                "FAULTS_BROKER": f"{base}/1",
                "FAULTS_RECORDS": f"{base}/2",
                "PYTHONPATH": str(ROOT),
            }
            import redis

            self.records = redis.Redis.from_url(f"{base}/2")
            self.broker = redis.Redis.from_url(f"{base}/1")
            with override_settings(**settings), self._processes():
                self._play()
        finally:
            server.stop()
        self.outcome.seconds = time.monotonic() - started
        return self.outcome

    @contextlib.contextmanager
    def _processes(self) -> Iterator[None]:
        try:
            yield
        finally:
            for process in [*self.producers, *self.workers]:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=STOP_SLACK)

    def _play(self) -> None:
        for index in range(WORKERS):
            self.workers.append(self._worker(index))
        self._wait_ready(self.workers)
        stop = self.directory / "stop"
        share = KILL_SHARE if self.scenario.fault == "redelivery" else 0.0
        for index in range(PRODUCERS):
            command = [sys.executable, str(PRODUCER), str(index), str(KEYS), str(share)]
            command += [str(PAUSE), str(stop)]
            self.producers.append(self._spawn(command, f"producer{index}"))
        deadline = time.monotonic() + PLAY * self.repeats
        next_kill = time.monotonic() + KILL_EVERY
        while time.monotonic() < deadline:
            if self.scenario.fault == "worker-kill" and time.monotonic() >= next_kill:
                self._kill_one()
                next_kill = time.monotonic() + KILL_EVERY
            self._restart_dead()
            self._monitor()
            time.sleep(MONITOR)
        stop.touch()
        for producer in self.producers:
            producer.wait(timeout=START_TIMEOUT)
        drain_until = time.monotonic() + DRAIN_TIMEOUT
        while not self._drained():
            if time.monotonic() > drain_until:
                self.outcome.drained = False
                break
            self._restart_dead()
            self._monitor()
            time.sleep(MONITOR)
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            worker.wait(timeout=START_TIMEOUT)
        self._read()
        self._keys_end()

    def _worker(self, index: int) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "celery", "-A", "faults.unique_app", "worker"]
        command += ["--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        command += ["--loglevel=WARNING", f"--hostname=w{index}-{time.monotonic_ns()}@%h"]
        return self._spawn(command, f"worker{index}")

    def _spawn(self, command: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.directory / f"{log}.log", "ab") as output:
            return subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )

    def _wait_ready(self, workers: list[subprocess.Popen[bytes]]) -> None:
        pids = {worker.pid for worker in workers}

        def ready() -> bool:
            self._read()
            seen = {r.pid for r in self.outcome.records if r.kind == "ready"}
            return pids <= seen

        wait_for(ready, START_TIMEOUT, "the Celery workers to be ready")

    def _kill_one(self) -> None:
        """SIGKILL a worker: one running a task if any (seen from its records), else any."""
        self._read()
        busy = _busy_pids(self.outcome.records)
        alive = [w for w in self.workers if w.poll() is None]
        chosen = [w for w in alive if w.pid in busy] or alive
        if not chosen:
            return
        victim = random.choice(chosen)
        victim.send_signal(signal.SIGKILL)
        self.outcome.kills[victim.pid] = time.monotonic()

    def _restart_dead(self) -> None:
        for index, worker in enumerate(self.workers):
            if worker.poll() is not None:
                self.outcome.kills.setdefault(worker.pid, time.monotonic())
                self.workers[index] = self._worker(index)

    def _read(self) -> None:
        lines = self.records.lrange("faults:unique:records", self.seen, -1)
        self.seen += len(lines)
        self.outcome.records += [Run(*json.loads(line)) for line in lines]

    def _drained(self) -> bool:
        self._read()
        waiting = self.broker.llen("celery") + self.broker.hlen("unacked")
        alive = {worker.pid for worker in self.workers if worker.poll() is None}
        busy = _busy_pids(self.outcome.records) & alive  # a killed worker's start never ends
        return waiting == 0 and len(alive) == len(self.workers) and not busy

    def _monitor(self) -> None:
        """A key still saying ``running as T`` past the running lease after T's worker was
        killed (and T not started again since) is held past its lease."""
        from django_redis_lock import get_lock_manager

        self._read()
        starts: dict[str, Run] = {}
        for record in self.outcome.records:
            if record.kind == "prerun":
                starts[record.task_id] = record
        killed = self.outcome.kills | _suicides(self.outcome.records)
        now = time.monotonic()
        for info in get_lock_manager().list("unique:*"):
            words = (info.label or "").split()
            if len(words) < 3 or words[-3:-1] != ["running", "as"]:
                continue
            start = starts.get(words[-1])
            if start is None or start.pid not in killed:
                continue
            if now - killed[start.pid] > RUNNING_LEASE + LEASE_SLACK:
                flag = (info.name, words[-1])
                if flag not in self.flagged:
                    self.flagged.add(flag)
                    self.outcome.held_past_lease.append(f"{info.name} ({info.label})")

    def _keys_end(self) -> None:
        """Every key left must end within the TTL it has now (a lease of its mode)."""
        from django_redis_lock import get_lock_manager

        manager = get_lock_manager()
        left = {info.name: info.ttl for info in manager.list("unique:*")}
        if not left:
            return
        time.sleep(max(left.values()) + LEASE_SLACK)  # nothing to wait on: a key's expiry
        self.outcome.keys_left = [info.name for info in manager.list("unique:*")]


def _suicides(records: list[Run]) -> dict[int, float]:
    return {r.pid: r.at for r in records if r.kind == "suicide"}


def _busy_pids(records: list[Run]) -> set[int]:
    """The pids whose last start has no ``post`` yet."""
    running: dict[int, str | None] = {}
    for record in records:
        if record.kind == "prerun":
            running[record.pid] = record.task_id
        elif record.kind == "post" and running.get(record.pid) == record.task_id:
            running[record.pid] = None
    return {pid for pid, task_id in running.items() if task_id is not None}


# The checker.


@dataclass
class UniqueResult:
    outcome: UniqueOutcome
    enqueues: int = 0
    sent: int = 0
    errors: int = 0
    runs: int = 0
    skipped: int = 0
    kills: int = 0
    killed_runs: int = 0
    redelivered: int = 0
    redelivered_skipped: int = 0
    overlaps: list[str] = field(default_factory=list)
    late_debounced: list[str] = field(default_factory=list)
    last_not_run: list[str] = field(default_factory=list)
    inside_window: list[str] = field(default_factory=list)
    false_duplicates: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations


def check(outcome: UniqueOutcome, *, demand_shows: bool = True) -> UniqueResult:
    """What the records show against what docs/unique.rst promises."""
    from faults.unique_app import WINDOW

    result = UniqueResult(outcome)
    records = outcome.records
    killed = outcome.kills | _suicides(records)
    result.kills = len(killed)
    enqueues = [r for r in records if r.kind == "enq"]
    result.enqueues = len(enqueues) + sum(r.kind == "enq-error" for r in records)
    result.errors = sum(r.kind == "enq-error" for r in records)
    sent = [e for e in enqueues if e.extra[0] == e.task_id]
    result.sent = len(sent)
    ended = {(r.task_id, r.pid): r.at for r in records if r.kind == "end"}
    finished: dict[str, float] = {}  # task id: when it ended, was skipped or was killed
    runs: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    end_of_play = max((r.at for r in records), default=0.0)
    for record in records:
        if record.kind == "run":
            end = ended.get((record.task_id, record.pid))
            if end is None:
                end = killed.get(record.pid, end_of_play)
                result.killed_runs += record.pid in killed
            runs[record.task, record.key].append((record.at, end, record.task_id))
            finished.setdefault(record.task_id, end)
            finished[record.task_id] = min(finished[record.task_id], end)
        elif record.kind == "post" and record.extra == "skipped":
            result.skipped += 1
            finished.setdefault(record.task_id, record.at)
    result.runs = sum(len(spans) for spans in runs.values())
    _overlaps(result, runs)
    _redeliveries(result, records)
    _debounce(result, records, enqueues, finished)
    _throttle(result, sent, WINDOW)
    sent_ids = {(e.task_id, e.task, e.key): e.at for e in sent}
    for e in enqueues:
        got = e.extra[0]
        if got != e.task_id and sent_ids.get((got, e.task, e.key), e.extra[1] + 1) > e.extra[1]:
            result.false_duplicates.append(f"{e.task} {e.key}: {e.task_id} got {got}")
    _violations(result, demand_shows)
    return result


def _overlaps(result: UniqueResult, runs: dict[tuple[str, str], list[Any]]) -> None:
    for (task, key), spans in runs.items():
        if task == "unique.window":  # a throttle's key is not the task's: not promised
            continue
        latest = None
        for start, end, task_id in sorted(spans):
            if latest is not None and start < latest[1]:
                result.overlaps.append(
                    f"{task} {key}: {latest[2]} and {task_id}, {latest[1] - start:.3f} s"
                )
            if latest is None or end > latest[1]:
                latest = (start, end, task_id)


def _redeliveries(result: UniqueResult, records: list[Run]) -> None:
    starts: dict[str, int] = defaultdict(int)
    for record in records:
        if record.kind == "prerun":
            starts[record.task_id] += 1
            if starts[record.task_id] > 1:
                result.redelivered += 1
        elif record.kind == "post" and record.extra == "skipped" and starts[record.task_id] > 1:
            result.redelivered_skipped += 1


def _debounce(
    result: UniqueResult, records: list[Run], enqueues: list[Run], finished: dict[str, float]
) -> None:
    """A debounced task that starts after a later enqueue of its key returned (and before
    that task ended, was skipped or killed) must not run; the last enqueue of a key runs."""
    debounced = [e for e in enqueues if e.task == "unique.replace"]
    # When its enqueue returned: a later enqueue is one that began after that (two enqueues
    # under way at once may take the key in either order).
    enqueued_at = {e.task_id: e.extra[1] for e in debounced}
    prerun: dict[tuple[str, int], float] = {}
    for record in records:
        if record.kind == "prerun":
            prerun[record.task_id, record.pid] = record.at
        if record.kind != "run" or record.task != "unique.replace":
            continue
        began = prerun.get((record.task_id, record.pid), record.at)
        mine = enqueued_at.get(record.task_id, float("inf"))
        for later in debounced:
            if later.key != record.key or later.task_id == record.task_id or later.at <= mine:
                continue
            if later.extra[1] < began and finished.get(later.task_id, float("inf")) > began:
                result.late_debounced.append(
                    f"key {record.key}: {record.task_id} ran after {later.task_id} was enqueued"
                )
                break
    last: dict[str, Run] = {}
    for e in debounced:
        if e.key not in last or e.at > last[e.key].at:
            last[e.key] = e
    ran = {r.task_id for r in records if r.kind == "end"}
    result.last_not_run = [
        f"key {e.key}: {e.task_id}" for e in last.values() if e.task_id not in ran
    ]


def _throttle(result: UniqueResult, sent: list[Run], window: float) -> None:
    by_key: dict[str, list[Run]] = defaultdict(list)
    for e in sent:
        if e.task == "unique.window":
            by_key[e.key].append(e)
    for key, sends in by_key.items():
        sends.sort(key=lambda e: e.at)
        for before, after in itertools.pairwise(sends):
            if after.extra[1] < before.at + window - CLOCK_SLACK:
                gap = after.extra[1] - before.at
                result.inside_window.append(f"key {key}: sent {gap:.3f} s apart")


def _violations(result: UniqueResult, demand_shows: bool) -> None:
    outcome = result.outcome
    found = [
        ("two runs of one key at once", result.overlaps),
        ("a debounced task ran after a later enqueue", result.late_debounced),
        ("the last enqueue of a debounced key did not run", result.last_not_run),
        ("two throttled tasks sent inside one window", result.inside_window),
        ("a duplicate got a task not of its key", result.false_duplicates),
        ("a key held past its lease", outcome.held_past_lease),
        ("keys left past their TTL", outcome.keys_left),
    ]
    for what, seen in found:
        if seen:
            result.violations.append(f"{what}: {len(seen)} ({'; '.join(seen[:3])})")
    if not outcome.drained:
        result.violations.append(f"tasks still queued or running {DRAIN_TIMEOUT:g} s after")
    if result.errors:
        result.violations.append(f"{result.errors} enqueues failed")
    if demand_shows:
        if outcome.scenario.fault == "worker-kill" and not result.killed_runs:
            result.violations.append("no worker was killed while it ran a task")
        if outcome.scenario.fault == "redelivery" and not result.redelivered_skipped:
            result.violations.append("no redelivered task found its key held by another")


COLUMNS = (
    "scenario",
    "enqueues",
    "sent",
    "runs",
    "skipped",
    "kills",
    "killed runs",
    "redelivered",
    "redel. skipped",
    "overlaps",
    "late debounced",
    "last not run",
    "inside window",
    "false dup.",
    "held past lease",
)


def row(result: UniqueResult) -> list[str]:
    outcome = result.outcome
    counts = [
        result.enqueues,
        result.sent,
        result.runs,
        result.skipped,
        result.kills,
        result.killed_runs,
        result.redelivered,
        result.redelivered_skipped,
        len(result.overlaps),
        len(result.late_debounced),
        len(result.last_not_run),
        len(result.inside_window),
        len(result.false_duplicates),
        len(outcome.held_past_lease) + len(outcome.keys_left),
    ]
    return [outcome.scenario.name, *map(str, counts)]
