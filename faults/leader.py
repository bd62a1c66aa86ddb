"""The leadership scenarios: supervisors (``manage.py locks lead``) whose children write the
store with their epoch, and the faults that strike the leading one.

Each scenario starts its topology and a fresh store, runs SUPERVISORS processes of
``manage.py locks lead faults:leader --timeout LEASE --grace GRACE -- python
faults/leader_child.py ...``, each in a process group of its own (with its child), waits until
one leads, its child writes and the others wait in the queue, then strikes the leading
supervisor: SIGKILL (its child is orphaned and goes on writing with its old epoch), SIGTERM
(the hand-over: the child is stopped, then the supervisor resigns), or SIGSTOP of its whole
group (supervisor and child) until a follower led and wrote, then SIGCONT (the child writes
late with its old epoch before its supervisor learns the loss and stops it). Every wait is
bounded. The children also write a history (faults/leader_history.py), merged at the end. The
checker (faults/leader_check.py) reads the store and checks the history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.leader_history import KEY, environment
from faults.recorder import merge
from faults.scenarios import (
    LEASE,
    LONG_CUT,
    RECOVERY_TIMEOUT,
    REJOIN_TIMEOUT,
    SOCKET_TIMEOUT,
    START_TIMEOUT,
    STOP_SLACK,
    WORK,
    cut_and_heal,
    wait_for,
)
from faults.store import Fault, Store, create
from faults.topologies import CACHE, TOPOLOGIES, Partition, Topology, server_settings
from testproject.redis_server import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "faults" / "leader_child.py"
NAME = KEY
# The merged history of a scenario, in its directory.
HISTORY = "leader.history.jsonl"
SUPERVISORS = 3
# SIGTERM to SIGKILL, for a child: the suite's child stops at once on SIGTERM.
GRACE = 2.0
# The lease of the hand-over scenario: long, so that a hand-over that waited it out would show.
HANDOVER_LEASE = 30.0
# The bound for a hand-over on SIGTERM: the follower's child starts within a second.
HANDOVER_BOUND = 1.0
# How long a supervisor may take to start (Django) and queue, or to exit when told.
SUPERVISOR_TIMEOUT = 20.0
# In a partition scenario, the supervisor started first (and led before the others started):
# the only one on the old primary's side, a plain cache pointed straight at it.
OLD_SIDE = 0


@dataclass(frozen=True)
class LeaderScenario:
    """One fault against the leading supervisor, and what the documentation promises."""

    name: str
    topology: str
    fault: str  # "supervisor-kill", "supervisor-term", "leader-stop", "partition-reset"...
    promise: str
    lease: float = LEASE
    short: bool = False
    socket_timeout: float | None = SOCKET_TIMEOUT
    wait_replicas: int = 0

    @property
    def bound(self) -> float | None:
        """Seconds from the fault to the follower's child's start, at most (None: no bound).
        After a SIGKILL the lease runs out at most a lease after the last renewal, which was
        at most a renewal period (a third of the lease) before the kill."""
        if self.fault == "supervisor-kill":
            return self.lease + self.lease / 3
        if self.fault == "supervisor-term":
            return HANDOVER_BOUND
        return None


LEADER_SCENARIOS = [
    LeaderScenario(
        "leader-kill",
        "single",
        "supervisor-kill",
        "a SIGKILLed leading supervisor is replaced within its lease and one renewal period "
        "(a third of the lease): the follower's child starts by then; the orphaned child goes "
        "on with its old epoch, and once the new epoch wrote, the store refuses every write of "
        "it; never two children with a current epoch",
        short=True,
    ),
    LeaderScenario(
        "leader-term",
        "single",
        "supervisor-term",
        "SIGTERM to the leading supervisor stops its child, then resigns: the follower's child "
        "starts within a second although the lease is 30 s; never two children running",
        lease=HANDOVER_LEASE,
        short=True,
    ),
    LeaderScenario(
        "leader-stop",
        "single",
        "leader-stop",
        "a leader stopped (SIGSTOP, supervisor and child) past its lease loses the leadership; "
        "resumed after the new leader wrote, its child's late writes with the old epoch are "
        "all refused and its supervisor stops it; never two children with a current epoch",
        short=True,
    ),
    *(
        LeaderScenario(
            f"leader-partition-{mode}-wait-0",
            "partition-r2-left0",
            f"partition-{mode}",
            "a partition leaves the leading supervisor with the old primary, where it goes on "
            "renewing and its child on writing; the sentinels promote a replica and, once the "
            "lease ran out there, a follower leads with a higher epoch: from its first write "
            "on the store refuses every write of the old epoch; after the heal the old "
            "primary's demotion deposes the old leader, which stops its child; never two "
            "children with a current epoch",
            wait_replicas=0,
        )
        for mode in ("reset", "hold")
    ),
    LeaderScenario(
        "leader-partition-reset-wait-1",
        "partition-r2-left0",
        "partition-reset",
        "with WAIT_REPLICAS=1 and both replicas on the sentinels' side, the leading "
        "supervisor left with the old primary cannot renew (no replica acknowledges): it "
        "loses the leadership at the end of its lease and stops its child; a follower leads "
        "on the promoted replica with a higher epoch; the store refuses every write of the "
        "old epoch after the new one's first; never two children with a current epoch",
        wait_replicas=1,
    ),
    LeaderScenario(
        "leader-partition-r2-left1-reset-wait-1",
        "partition-r2-left1",
        "partition-reset",
        "with two replicas, one left on the old primary's side, WAIT_REPLICAS=1 is met only "
        "there: the leading supervisor left with the old primary goes on leading, and no "
        "follower leads on the Sentinel side until the heal; the old primary's demotion "
        "deposes the old leader, a follower leads with a higher epoch, the store refuses every "
        "write of the old epoch after the new one's first; never two children with a current "
        "epoch",
        wait_replicas=1,
    ),
]


@dataclass
class LeaderOutcome:
    """What a leadership scenario recorded, for the checker."""

    scenario: LeaderScenario
    store: Path
    faults: list[Fault]
    hung_at_stop: list[int] = field(default_factory=list)
    seconds: float = 0.0
    # The epoch that led when each fault struck, in the faults' order.
    struck: list[int] = field(default_factory=list)
    # The children's histories merged, ordered by time (faults/leader_history.py).
    history: Path | None = None


class LeaderRun:
    """One leadership scenario being played: its topology, store, supervisors, faults."""

    def __init__(
        self, scenario: LeaderScenario, directory: Path, repeats: int, cut: float = LONG_CUT
    ) -> None:
        self.scenario = scenario
        self.directory = directory
        self.repeats = repeats
        self.cut = cut
        self.topology: Topology = TOPOLOGIES[scenario.topology]()
        self.store_path = directory / "store.sqlite3"
        self.stop_file = directory / "stop"
        # The children's histories, one file each (faults/leader_history.py), merged at the end.
        self.history = directory / "history"
        self.history.mkdir(exist_ok=True)
        self.supervisors: dict[int, subprocess.Popen[bytes]] = {}
        self.faults: list[Fault] = []
        self.struck: list[int] = []
        self.envs: dict[int, dict[str, str]] = {}
        # Partitions: when the sentinels promoted, the proxies forwarded again (monotonic).
        self.marks: dict[str, float] = {}
        # Supervisors that exited on their own in a partition scenario, and restarted.
        self.exits: list[str] = []
        self.restarting = threading.Lock()
        self.stopping = False

    # -- supervisors -----------------------------------------------------------------------------

    def spawn(self, index: int) -> None:
        """Start supervisor ``index`` (again, after a fault), in a process group of its own."""
        s = self.scenario
        child = [sys.executable, str(CHILD), str(self.store_path), str(index), str(WORK)]
        lead = ["locks", "lead", NAME, "--timeout", f"{s.lease:g}", "--grace", f"{GRACE:g}"]
        command = [sys.executable, str(ROOT / "manage.py"), *lead, "--", *child]
        log = open(self.directory / f"supervisor-{index}.log", "ab")  # noqa: SIM115 (the child's)
        with log:
            self.supervisors[index] = subprocess.Popen(
                [*command, str(self.stop_file)],
                cwd=ROOT,
                env={**self.envs[index], **environment(self.history, s.lease)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its group: the supervisor and its child
                preexec_fn=die_with_parent(),
            )

    def _restart(self, index: int) -> None:
        """Start supervisor ``index`` again each time it exits before the run stops it, as the
        service manager the documentation asks for would: a partition can make a waiting
        supervisor exit on "Redis is unavailable"; noted. The thread lives as long as the
        process it started (which dies with it: die_with_parent)."""
        while True:
            process = self.supervisors[index]
            code = process.wait()
            with self.restarting:
                if self.stopping or self.supervisors[index] is not process:
                    return
                log = (self.directory / f"supervisor-{index}.log").read_text(errors="replace")
                last = log.strip().splitlines()[-1:] or ["(nothing)"]
                self.exits.append(f"status {code}: {last[0].split(': ')[-1][:100]}")
                self.spawn(index)

    def leading(self) -> tuple[int, int, int]:
        """Wait (bounded) until a running supervisor leads: its index, pid and epoch."""
        from django_redis_lock import get_lock_manager

        def found() -> tuple[int, int, int] | None:
            info = get_lock_manager().get("leader:" + NAME)
            match = re.search(r"\bpid (\d+)", info.owner) if info is not None else None
            if info is None or match is None:
                return None
            for index, process in self.supervisors.items():
                if process.pid == int(match[1]) and process.poll() is None:
                    return index, process.pid, info.fencing_token
            return None

        leading: tuple[int, int, int] = wait_for(found, SUPERVISOR_TIMEOUT, "a supervisor to lead")
        return leading

    def queued(self) -> int:
        """How many supervisors wait in the leadership's queue."""
        from django_redis import get_redis_connection

        from django_redis_lock.runtime import runtime

        queue = runtime().for_locks(None).keys_for("leader:" + NAME).queue
        return int(get_redis_connection(CACHE).zcard(queue))

    def stop_all(self, store: Store) -> list[int]:
        """Stop the supervisors (SIGTERM) and every child (the stop file: orphans too); wait,
        bounded; SIGKILL the groups of those that hung, and return their pids."""
        with self.restarting:
            self.stopping = True
        self.stop_file.touch()
        for process in self.supervisors.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE + WORK + STOP_SLACK
        hung = []
        for process in self.supervisors.values():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(process.pid)
        children = {e.pid for e in store.events() if e.kind == "child-start"}
        ended = {e.pid for e in store.events() if e.kind in ("child-stop", "child-exit")}
        for pid in children - ended:  # an orphan still writing, or one that died by signal
            if _wait_gone(pid, max(0.0, deadline - time.monotonic())):
                continue
            hung.append(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in self.supervisors.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_SLACK)
        return hung

    # -- faults ----------------------------------------------------------------------------------

    def _ready(self, store: Store, since: float) -> tuple[int, int, int]:
        """Wait (bounded) until a supervisor leads, its child wrote since ``since`` and every
        other supervisor waits in the queue: the leading one's index, pid and epoch."""
        leading = self.leading()

        def wrote() -> bool:
            row = store.connection.execute(
                "SELECT 1 FROM sections WHERE accepted AND token = ? AND start >= ? LIMIT 1",
                (leading[2], since),
            ).fetchone()
            return row is not None

        wait_for(wrote, RECOVERY_TIMEOUT, "the leader's child to write")
        wait_for(lambda: self.queued() >= SUPERVISORS - 1, SUPERVISOR_TIMEOUT, "the followers")
        return leading

    def _new_epoch_wrote(self, store: Store, epoch: int) -> bool:
        row = store.connection.execute(
            "SELECT 1 FROM sections WHERE accepted AND token > ? LIMIT 1", (epoch,)
        ).fetchone()
        return row is not None

    def inject(self, store: Store, index: int, pid: int, epoch: int) -> Fault:
        """Strike the leading supervisor ``pid`` once; the fault."""
        plays: dict[str, Callable[[Store, int, int, int], tuple[float, str]]] = {
            "supervisor-kill": self._kill,
            "supervisor-term": self._term,
            "leader-stop": self._stop,
            "partition-reset": self._partition,
            "partition-hold": self._partition,
        }
        start, detail = plays[self.scenario.fault](store, index, pid, epoch)
        end = time.monotonic()
        return Fault(self.scenario.fault, start, end, time.time() - (end - start), detail)

    def _kill(self, store: Store, index: int, pid: int, epoch: int) -> tuple[float, str]:
        start = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # the supervisor only: its child is orphaned
        self.supervisors[index].wait(timeout=STOP_SLACK)
        self.spawn(index)
        return start, f"leading supervisor pid {pid} (epoch {epoch}) killed (SIGKILL)"

    def _term(self, store: Store, index: int, pid: int, epoch: int) -> tuple[float, str]:
        start = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        self.supervisors[index].wait(timeout=GRACE + STOP_SLACK)
        self.spawn(index)
        return start, f"leading supervisor pid {pid} (epoch {epoch}) sent SIGTERM"

    def _stop(self, store: Store, index: int, pid: int, epoch: int) -> tuple[float, str]:
        """Stop the leader's group until a new leader's child wrote; resume its child first,
        and its supervisor once the child tried a write with the old epoch (else the
        supervisor, finding the loss at once, could stop the child before it writes)."""
        child = self._child_of(store, epoch)
        start = time.monotonic()
        os.killpg(pid, signal.SIGSTOP)  # the supervisor and its child
        try:
            wait_for(lambda: self._new_epoch_wrote(store, epoch), RECOVERY_TIMEOUT, "a new leader")
            resumed = time.monotonic()
            os.kill(child, signal.SIGCONT)

            def tried() -> bool:
                row = store.connection.execute(
                    "SELECT 1 FROM sections WHERE pid = ? AND end >= ? LIMIT 1", (child, resumed)
                ).fetchone()
                return row is not None

            with contextlib.suppress(RuntimeError):  # the checker counts what was written
                wait_for(tried, WORK + STOP_SLACK, "the resumed child to write")
        finally:
            os.killpg(pid, signal.SIGCONT)
        return start, (
            f"leading supervisor pid {pid} and its child (epoch {epoch}) stopped (SIGSTOP) "
            f"{resumed - start:.2f} s, until a new leader's child wrote; the child resumed "
            f"first, the supervisor {time.monotonic() - resumed:.2f} s later"
        )

    def _partition(self, store: Store, index: int, pid: int, epoch: int) -> tuple[float, str]:
        """Cut the leading supervisor (alone on the old primary's side) off with the old
        primary, until the sentinels promoted a replica and the run's cut is over; heal."""
        topology = self.topology
        assert isinstance(topology, Partition)
        assert index == OLD_SIDE
        mode = self.scenario.fault.removeprefix("partition-")
        start, detail = cut_and_heal(topology, mode, self.cut, self.marks)
        return start, f"{detail}; the leading supervisor (epoch {epoch}) left with the old primary"

    def _rejoin(self, store: Store, fault: Fault, epoch: int) -> Fault:
        """After a partition's heal: wait (bounded) until the sentinels demoted the old
        primary, every replica is in sync, a new epoch wrote and the old leader's child
        stopped; the fault, with when these happened."""
        topology = self.topology
        assert isinstance(topology, Partition)
        demoted = topology.wait_demoted()
        with contextlib.suppress(TimeoutError, RuntimeError):  # the checker reports the rest
            topology.wait_whole()
            wait_for(lambda: self._new_epoch_wrote(store, epoch), REJOIN_TIMEOUT, "recovery")
            wait_for(
                lambda: self._stopped_after(store, epoch, fault.start),
                REJOIN_TIMEOUT,
                "the old leader to stop its child",
            )
        stopped = self._stopped_after(store, epoch, fault.start)

        def since(moment: float | None, mark: float, what: str) -> str:
            return "not within the wait" if moment is None else f"{moment - mark:.1f} s {what}"

        detail = (
            f"{fault.detail}; the old leader's child stopped "
            f"{since(stopped, fault.start, 'after the cut')}, the old primary was demoted "
            f"{since(demoted, self.marks['healed'], 'after the heal')}"
        )
        with self.restarting:
            exits = list(self.exits)
        if exits:  # the causes, without the ports, each once
            causes = sorted({re.sub(r"\d+", "N", cause) for cause in exits})
            detail += f"; {len(exits)} exits of followers, restarted ({'; '.join(causes)})"
        return dataclasses.replace(fault, detail=detail)

    def _stopped_after(self, store: Store, epoch: int, moment: float) -> float | None:
        """When (monotonic) the child of ``epoch`` stopped, if it did after ``moment``."""
        row = store.connection.execute(
            "SELECT at FROM events WHERE kind IN ('child-stop', 'child-exit') AND detail = ? "
            "AND at >= ? LIMIT 1",
            (f"epoch {epoch}", moment),
        ).fetchone()
        return None if row is None else float(row[0])

    def _child_of(self, store: Store, epoch: int) -> int:
        """The pid of the child started with ``epoch``."""
        row = store.connection.execute(
            "SELECT pid FROM events WHERE kind = 'child-start' AND detail = ?", (f"epoch {epoch}",)
        ).fetchone()
        return int(row[0])

    def _after(self, store: Store, fault: Fault, epoch: int) -> None:
        """Wait (bounded) until a new epoch wrote and, after a stop, the resumed supervisor
        stopped its child (and queued again)."""
        with contextlib.suppress(RuntimeError):  # the checker reports what did not happen
            wait_for(lambda: self._new_epoch_wrote(store, epoch), RECOVERY_TIMEOUT, "recovery")
            if self.scenario.fault == "leader-stop":

                def child_stopped() -> bool:
                    row = store.connection.execute(
                        "SELECT 1 FROM events WHERE kind = 'child-stop' AND detail = ? "
                        "AND at >= ? LIMIT 1",
                        (f"epoch {epoch}", fault.end),
                    ).fetchone()
                    return row is not None

                wait_for(child_stopped, RECOVERY_TIMEOUT, "the resumed leader to stop its child")

    # -- the run ---------------------------------------------------------------------------------

    def play(self) -> LeaderOutcome:
        """Start everything, strike the leader ``repeats`` times, stop everything."""
        from django.test.utils import override_settings

        started = time.monotonic()
        create(self.store_path)
        store = Store(self.store_path)
        self.topology.start()
        hung: list[int] = []
        try:
            s = self.scenario
            # The controller reads the leadership only before a partition's cut, and straight
            # from the primary: django-redis keeps a Sentinel pool per LOCATION for the life of
            # the process, which would reach the sentinels of the previous scenario.
            settings = self._settings(OLD_SIDE)
            for index in range(SUPERVISORS):
                self.envs[index] = {
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": "faults.settings",
                    "FAULTS_SETTINGS": json.dumps(supervisor_settings(self._settings(index))),
                    "PYTHONPATH": str(ROOT),
                }
            with override_settings(**settings):
                self._spawn_all()
                try:
                    self._faults(store)
                finally:
                    hung = self.stop_all(store)
        finally:
            self.topology.stop()
        outcome = LeaderOutcome(s, self.store_path, self.faults, hung, time.monotonic() - started)
        outcome.struck = self.struck
        outcome.history = self.directory / HISTORY
        merge(self.history, outcome.history)
        store.close()
        return outcome

    def _settings(self, index: int) -> dict[str, Any]:
        """Supervisor ``index``'s settings: in a partition scenario, the old primary's side
        (OLD_SIDE) or the sentinels'; else everyone's."""
        s, topology = self.scenario, self.topology
        if isinstance(topology, Partition) and index == OLD_SIDE:
            return server_settings(topology.old.url, s.socket_timeout, s.wait_replicas)
        return topology.settings(s.socket_timeout, s.wait_replicas)

    def _spawn_all(self) -> None:
        """Start the supervisors; in a partition scenario OLD_SIDE first, the others once it
        leads (bounded wait), so that the partition leaves the leader with the old primary."""
        first = [OLD_SIDE] if isinstance(self.topology, Partition) else []
        for index in first:
            self.spawn(index)
            self.leading()  # the only one running
        for index in range(SUPERVISORS):
            if index not in first:
                self.spawn(index)
                # Only those that follow the sentinels: the one pinned to the old primary
                # would fail again and again on the demoted server.
                if first:
                    threading.Thread(target=self._restart, args=(index,), daemon=True).start()

    def _faults(self, store: Store) -> None:
        since = time.monotonic() - START_TIMEOUT
        partitioned = isinstance(self.topology, Partition)
        for _ in range(1 if partitioned else self.repeats):  # one partition: it demotes P
            index, pid, epoch = self._ready(store, since)
            fault = self.inject(store, index, pid, epoch)
            if partitioned:
                fault = self._rejoin(store, fault, epoch)
            self.faults.append(fault)
            self.struck.append(epoch)
            store.fault(fault.kind, fault.start, fault.end, fault.detail)
            self._after(store, fault, epoch)
            since = time.monotonic()
        time.sleep(1.0)  # a last second of normal work after the last recovery


def _wait_gone(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` (not a child of this one) is gone within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def supervisor_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The topology's settings with a "default" cache too: a management command runs Django's
    system checks, which require one (the workers of the other scenarios run none)."""
    default = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    return {**settings, "CACHES": {"default": default, **settings["CACHES"]}}
