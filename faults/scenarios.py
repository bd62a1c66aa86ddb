"""The scenarios and the controller that plays them: workers, faults, bounded waits.

Every scenario starts its topology and a fresh store, runs WORKERS worker processes that
contend for one lock, injects its fault (once in a short run, more often in a long one), waits
(bounded) until a section succeeds again, then stops the workers and returns what the store
recorded for the checker. Faults are real signals and real Redis commands, on loopback only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faults.histories import LINEARIZABLE, MAY_VIOLATE, VIOLATES
from faults.store import (
    FENCED,
    READ_WRITE,
    RWLOCK,
    SEMAPHORE,
    SEMAPHORE_LIMIT,
    Fault,
    Store,
    create,
)
from faults.topologies import (
    TOPOLOGIES,
    Cluster,
    Partition,
    Quorum,
    QuorumHold,
    Sentinel,
    Topology,
    pubsub_clients,
)
from faults.worker import HISTORY
from testproject.redis_server import die_with_parent

if TYPE_CHECKING:
    from django_redis_lock import LockInfo

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "faults" / "worker.py"
WORKERS = 4
LEASE = 1.0  # the lock's timeout: a dead holder blocks the others this long at most
WORK = 0.15  # seconds of work inside each section
BLOCKING_TIMEOUT = 3.0
SOCKET_TIMEOUT = 1.0
POLL = 0.005  # how often a bounded wait looks at its condition
START_TIMEOUT = 30.0  # for the workers to start (Django, a first pass)
RECOVERY_TIMEOUT = 20.0  # for a section to succeed after a fault
STOP_SLACK = 5.0  # beyond a pass's own bound, for a worker to exit when told
HOLDER_TIMEOUT = 10.0  # for a worker to be seen holding the lock
# A cluster primary killed: the others flag it failed after the node timeout (1 s) and its
# replica is elected 0.5-1 s later; from the kill to the cluster whole took 1.9-2.9 s here.
CLUSTER_TAKEOVER = 3.0
# Then the release the kill left unfinished is finished on the new primary and may hand the
# lock to the queue entry of a waiter that gave up while the primary was down: that entry's
# lease (LEASE) runs out, then the live waiters look again at the end of their wait slice
# (BLOCKING_TIMEOUT at most). One second of slack on a shared two-core machine.
CLUSTER_RECOVERY = LEASE + BLOCKING_TIMEOUT + 1.0
CLUSTER_PAUSE = CLUSTER_TAKEOVER + CLUSTER_RECOVERY
# Another primary killed: with Redis's default cluster-require-full-coverage every node
# answers CLUSTERDOWN from the failed one's FAIL flag until its replica is elected (0.5-1 s);
# then the next try (0.1 s after a refusal, a waiter's look at the end of a lease); slack.
OTHER_PRIMARY_PAUSE = 1.0 + LEASE + 0.5
# With full coverage off nothing waits: hand-overs between sections, and slack.
PARTIAL_COVERAGE_PAUSE = 0.5
# A killed quorum primary comes back empty (it keeps nothing on disk) only once it has been
# down for the lease and this much more, as Redlock requires: the holds it granted have ended.
RESTART_MARGIN = 0.5
# The lease of quorum-restart-after-ttl: its holder is stopped for half of it, and that must
# outlast the second for which each process skips a primary that failed to answer (the two
# restarted ones, see django_redis_lock.quorum), so that the other workers ask all five again
# while the holder is stopped: had the killed one come back before the lease ended, they
# would make a majority without it.
STOPPED_HOLDER_LEASE = 3.0
# The lease of redis-restart-empty: its holder, stopped while Redis restarts empty, must still
# be within it when another worker is granted the lock (a restart and a retry, well under 1 s).
EMPTY_RESTART_LEASE = 3.0
# The quorum's socket timeout: a frozen primary costs a call this long, then each process
# skips it for a second (while the others make a majority).
QUORUM_SOCKET_TIMEOUT = 0.5
# From a quorum fault's end to the next section: a hand-over, and slack.
QUORUM_RECOVERY = LEASE + 0.5
# The longest stretch without a section while two of five primaries are down (refused at
# once): hand-overs between sections, and slack.
QUORUM_PAUSE = 0.5
# While one primary is stopped: a release and the next acquire (another process, which has
# not yet learnt to skip it) may each wait for the socket timeout; slack.
QUORUM_FREEZE_PAUSE = 2 * QUORUM_SOCKET_TIMEOUT + 0.5
# How long a partition lasts (from the cut to the heal), short run and long run: long enough for
# the sentinels to promote a replica (down-after 1.5 s: 2.6-3.5 s after the cut here) and for
# the clients that follow them to work on it a while.
SHORT_CUT = 6.0
LONG_CUT = 9.0
# After the heal: for a section of a worker that follows the sentinels, once the old primary
# has been demoted (or was not within the topology's bound).
REJOIN_TIMEOUT = 20.0


@dataclass(frozen=True)
class Scenario:
    """One fault against one topology, and what the documentation promises about it."""

    name: str
    topology: str
    fault: str
    promise: str
    variant: str = FENCED
    socket_timeout: float | None = SOCKET_TIMEOUT
    wait_replicas: int = 0
    # What the documentation allows here: "overlaps" (two holders at once), "lost-updates".
    allows: frozenset[str] = frozenset()
    # Seconds from the fault's end (a holder's: its start) to the next section, at most.
    max_recovery: float | None = None
    # The longest stretch without a section that meets the fault, at most (seconds).
    max_pause: float | None = None
    # Whether the short run (CI) plays it.
    short: bool = True
    # The lock's timeout in the workers.
    lease: float = LEASE
    # What the scenario is there to show happening (an unsafe setting's effect): "overlaps",
    # "lost-updates", "deposed-grants" (holds granted by the old primary after a cut, all
    # discarded when it is demoted), "lockout" (the Sentinel side got no lock from the
    # promotion of a new primary until the heal). A long run fails a scenario that did not
    # show them; a short run only says so.
    shows: frozenset[str] = frozenset()
    # What the workers' histories must be (faults/histories.py): LINEARIZABLE (promised),
    # MAY_VIOLATE (a setting the documentation says is unsafe), VIOLATES (an unsafe setting
    # the scenario provokes: the checker must catch it).
    history: str = LINEARIZABLE


@dataclass
class Outcome:
    """What a scenario run recorded, for the checker."""

    scenario: Scenario
    store: Path
    faults: list[Fault]
    hung_at_stop: list[int] = field(default_factory=list)  # pids that did not stop when told
    seconds: float = 0.0
    counter: tuple[int, int] = (0, 0)
    # Partitions: the workers of the old primary's side, and when (monotonic) the sentinels
    # named a new primary ("promoted"), the proxies forwarded again ("healed") and the old
    # primary became a replica ("demoted").
    old_side: frozenset[int] = frozenset()
    marks: dict[str, float] = field(default_factory=dict)


TWO_PRIMARIES = (
    "a partition cuts the old primary off the sentinels, which promote a replica: the clients "
    "left with the old primary are granted locks there while the clients that follow the "
    "sentinels are granted them by the new one"
)


def partition(
    name: str, topology: str, mode: str, wait_replicas: int, promise: str, **options: Any
) -> Scenario:
    """A partition scenario: one cut ("reset" or "hold"), then the heal."""
    return Scenario(
        name,
        topology,
        f"partition-{mode}",
        promise,
        wait_replicas=wait_replicas,
        short=options.pop("short", False),
        **options,
    )


PARTITION_SCENARIOS = [
    *(
        partition(
            f"partition-{mode}-wait-0",
            "partition-r2-left0",
            mode,
            0,
            f"{TWO_PRIMARIES}: without WAIT_REPLICAS two holders overlap until the old primary "
            "is demoted, after the heal; fencing refuses a write only when its token is below "
            "one accepted already, and the two primaries' tokens come from one clock: most "
            "writes of both holders are accepted",
            allows=frozenset({"overlaps"}),
            shows=frozenset({"overlaps", "deposed-grants"}),
            history=VIOLATES,
        )
        for mode in ("reset", "hold")
    ),
    partition(
        "partition-reset-wait-0-read-write",
        "partition-r2-left0",
        "reset",
        0,
        f"{TWO_PRIMARIES}: without WAIT_REPLICAS two holders overlap; a read-then-write loses "
        "updates that fencing cannot refuse",
        variant=READ_WRITE,
        allows=frozenset({"overlaps", "lost-updates"}),
        shows=frozenset({"overlaps", "lost-updates"}),
        history=VIOLATES,
    ),
    *(
        partition(
            f"partition-{mode}-wait-1",
            "partition-r2-left0",
            mode,
            1,
            "with WAIT_REPLICAS=1 and both replicas on the sentinels' side, the old primary "
            "grants nothing once cut off (no replica acknowledges): no two holders",
            short=True,
        )
        for mode in ("reset", "hold")
    ),
    *(
        partition(
            f"partition-r3-left1-{mode}-wait-1",
            "partition-r3-left1",
            mode,
            1,
            "with three replicas, one left on the old primary's side, WAIT_REPLICAS=1 is met on "
            "both sides: two holders overlap (the rule of the docs: WAIT_REPLICAS must exceed the "
            "replicas that can stay with the old primary)",
            allows=frozenset({"overlaps"}),
            shows=frozenset({"overlaps", "deposed-grants"}),
            history=VIOLATES,
        )
        for mode in ("reset", "hold")
    ),
    *(
        partition(
            f"partition-r3-left1-{mode}-wait-2",
            "partition-r3-left1",
            mode,
            2,
            "with three replicas, one left on the old primary's side, WAIT_REPLICAS=2 is met on "
            "neither side while the cut lasts: no two holders, and no locks until the heal",
            shows=frozenset({"lockout"}),
        )
        for mode in ("reset", "hold")
    ),
    *(
        partition(
            f"partition-r2-left1-{mode}-wait-1",
            "partition-r2-left1",
            mode,
            1,
            "with two replicas, one left on the old primary's side, WAIT_REPLICAS=1 is met "
            "only there while the cut lasts: the old primary grants acknowledged holds that "
            "its demotion discards, and the Sentinel side gets no lock; a hold the old primary "
            "granted just before the heal (or its demotion) can still run when the new one "
            "grants the lock: two holders for a moment",
            allows=frozenset({"overlaps"}),
            shows=frozenset({"deposed-grants", "lockout"}),
            history=MAY_VIOLATE,
        )
        for mode in ("reset", "hold")
    ),
]

PAUSED_HOLDER = (
    "a holder can pause past its lease and write while the next holder writes too; fencing "
    "refuses a write older than one already accepted"
)
SCENARIOS = [
    Scenario(
        "holder-kill",
        "single",
        "holder-kill",
        "a crashed holder blocks the others for at most its lease",
        max_recovery=LEASE + 0.5,
    ),
    Scenario(
        "semaphore-holder-kill",
        "single",
        "holder-kill",
        "a semaphore's crashed holder gives its place back at the end of its lease; never more "
        "than its limit hold it at once",
        max_recovery=LEASE + 0.5,
        variant=SEMAPHORE,
    ),
    Scenario(
        "rwlock-holder-kill",
        "single",
        "holder-kill",
        "a read/write lock's crashed holder (a reader or the writer) gives its place back at "
        "the end of its lease; a writer never holds with anyone else",
        max_recovery=LEASE + 0.5,
        variant=RWLOCK,
    ),
    Scenario(
        "holder-stop",
        "single",
        "holder-stop",
        PAUSED_HOLDER,
        allows=frozenset({"overlaps"}),
        max_recovery=LEASE + 0.5,
    ),
    Scenario(
        "holder-stop-read-write",
        "single",
        "holder-stop",
        PAUSED_HOLDER + "; fencing protects writes, not reads: a read-then-write loses updates",
        variant=READ_WRITE,
        allows=frozenset({"overlaps", "lost-updates"}),
        max_recovery=LEASE + 0.5,
    ),
    Scenario(
        "redis-freeze",
        "single",
        "redis-freeze",
        "calls fail with LockUnavailable after the socket timeout; an unfinished release is "
        "finished once Redis is back, not at the end of the lease",
        max_recovery=1.5,
    ),
    Scenario(
        "redis-freeze-no-timeout",
        "single",
        "redis-freeze",
        "without a socket timeout calls wait for Redis; it serves them when it is back; a "
        "freeze longer than the lease can leave two holders (docs, W003): fencing refuses "
        "the stale write",
        socket_timeout=None,
        allows=frozenset({"overlaps"}),
        max_recovery=1.5,
        # A grant whose reply waited out the freeze comes after its lease: a second holder
        # may have been granted meanwhile, as the promise says (seen in a CI run).
        history=MAY_VIOLATE,
    ),
    Scenario(
        "redis-restart",
        "single",
        "redis-restart",
        "calls fail with LockUnavailable while Redis is down; locks kept by its append-only "
        "file stay held; unfinished releases are finished once it is back",
        max_recovery=1.5,
    ),
    Scenario(
        "redis-restart-empty",
        "single-volatile",
        "redis-restart-empty",
        "a restart without persistence forgets every grant (docs: production, topologies): "
        "while a holder is still within its lease the restarted, empty Redis grants the lock "
        "to another worker: two holders, which only fencing can tell apart",
        allows=frozenset({"overlaps"}),
        max_recovery=1.5,
        lease=EMPTY_RESTART_LEASE,
        history=VIOLATES,
    ),
    Scenario(
        "sentinel-failover",
        "sentinel",
        "failover",
        "without WAIT_REPLICAS the old primary may grant a lock the new one grants again: "
        "two holders are possible; fencing refuses the older one's late write",
        allows=frozenset({"overlaps"}),
        history=MAY_VIOLATE,
    ),
    Scenario(
        "sentinel-failover-wait-1",
        "sentinel",
        "failover",
        "with WAIT_REPLICAS=1 no two holders overlap across SENTINEL FAILOVER",
        wait_replicas=1,
    ),
    Scenario(
        "sentinel-kill-primary",
        "sentinel",
        "primary-kill",
        "without WAIT_REPLICAS a grant the replicas never saw is lost with the primary: two "
        "holders are possible; fencing refuses the older one's late write",
        allows=frozenset({"overlaps"}),
        history=MAY_VIOLATE,
    ),
    Scenario(
        "sentinel-kill-primary-wait-1",
        "sentinel",
        "primary-kill",
        "with WAIT_REPLICAS=1 no two holders overlap across a SIGKILL of the primary",
        wait_replicas=1,
    ),
    Scenario(
        "cluster-primary-kill",
        "cluster",
        "lock-primary-kill",
        "a failed primary makes the locks of its slots unavailable until a replica takes "
        "over; the same process then uses the new primary; without WAIT_REPLICAS two "
        "holders are possible; fencing refuses the older one's late write",
        allows=frozenset({"overlaps"}),
        max_recovery=CLUSTER_RECOVERY,
        max_pause=CLUSTER_PAUSE,
        history=MAY_VIOLATE,
    ),
    Scenario(
        "cluster-other-primary-kill",
        "cluster",
        "other-primary-kill",
        "no two holders when another primary fails; with Redis's default "
        "cluster-require-full-coverage every node refuses commands (CLUSTERDOWN) from the "
        "failure's detection until a replica took over, so the lock pauses about that long",
        max_pause=OTHER_PRIMARY_PAUSE,
        short=False,
    ),
    Scenario(
        "cluster-other-primary-kill-partial",
        "cluster-partial-coverage",
        "other-primary-kill",
        "with cluster-require-full-coverage no, locks on the other primaries keep working "
        "while a replica takes over a failed one's slots (listeners on it move)",
        max_pause=PARTIAL_COVERAGE_PAUSE,
        short=False,
    ),
    Scenario(
        "quorum-primary-kill",
        "quorum",
        "quorum-primary-kill",
        "a quorum lock on five primaries goes on while two of them are down (two that hold it "
        "when killed): no two holders, tokens increase; restarted empty after more than the "
        "lease, they change nothing",
        socket_timeout=QUORUM_SOCKET_TIMEOUT,
        max_recovery=QUORUM_RECOVERY,
        max_pause=QUORUM_PAUSE,
    ),
    Scenario(
        "quorum-primary-freeze",
        "quorum",
        "quorum-primary-freeze",
        "a stopped primary (one that holds the lock) costs a call at most its socket timeout; "
        "the other four go on granting; no two holders, tokens increase",
        socket_timeout=QUORUM_SOCKET_TIMEOUT,
        max_recovery=QUORUM_RECOVERY,
        max_pause=QUORUM_FREEZE_PAUSE,
        short=False,
    ),
    Scenario(
        "quorum-holder-kill",
        "quorum",
        "holder-kill",
        "a crashed holder of a quorum lock blocks the others for at most its lease",
        socket_timeout=QUORUM_SOCKET_TIMEOUT,
        max_recovery=LEASE + 0.5,
        short=False,
    ),
    Scenario(
        "quorum-restart-after-ttl",
        "quorum",
        "quorum-restart-after-ttl",
        "a hold on three of five primaries (two were down), its holder stopped within its "
        "lease, one of the three killed and restarted empty after more than the lease: the "
        "other workers get no majority while the stopped one holds (no two holders), then go "
        "on; tokens increase",
        socket_timeout=QUORUM_SOCKET_TIMEOUT,
        max_recovery=QUORUM_RECOVERY,
        max_pause=QUORUM_RECOVERY,
        short=False,
        lease=STOPPED_HOLDER_LEASE,
    ),
    *PARTITION_SCENARIOS,
]


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it is true; RuntimeError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)


class Run:
    """One scenario being played: its topology, store, workers and fault log."""

    def __init__(
        self,
        scenario: Scenario,
        directory: Path,
        repeats: int,
        freeze: float,
        cut: float = LONG_CUT,
    ):
        self.scenario = scenario
        self.directory = directory
        self.repeats = repeats
        self.freeze = freeze
        self.cut = cut
        self.topology: Topology = TOPOLOGIES[scenario.topology]()
        if isinstance(self.topology, Quorum):
            self.topology.restart_after = scenario.lease + RESTART_MARGIN
        self.store_path = directory / "store.sqlite3"
        self.stop_file = directory / "stop"
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.faults: list[Fault] = []
        self.envs: dict[int, dict[str, str]] = {}
        self.marks: dict[str, float] = {}

    # -- workers -------------------------------------------------------------------------------

    def spawn(self, index: int) -> None:
        """Start worker ``index`` (again, after a kill)."""
        s = self.scenario
        args = [s.variant, s.lease, WORK, BLOCKING_TIMEOUT, self.stop_file]
        log = open(self.directory / f"worker-{index}.log", "ab")  # noqa: SIM115 (the child's)
        with log:
            self.workers[index] = subprocess.Popen(
                [sys.executable, str(WORKER), str(self.store_path), str(index), *map(str, args)],
                env=self.envs[index],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )

    def pids(self) -> set[int]:
        """The pids of the workers now running."""
        return {process.pid for process in self.workers.values()}

    def stop_workers(self, store: Store) -> list[int]:
        """Tell the workers to stop and wait (bounded); SIGKILL and return those that hung."""
        self.stop_file.touch()
        socket_timeout = self.scenario.socket_timeout or 0.0
        bound = BLOCKING_TIMEOUT + WORK + 2 * socket_timeout + STOP_SLACK
        deadline = time.monotonic() + bound
        hung = []
        for process in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(process.pid)
                process.kill()
                process.wait(timeout=STOP_SLACK)
        return hung

    # -- faults --------------------------------------------------------------------------------

    def held_by_workers(self) -> list[tuple[int, LockInfo]]:
        """The holds of the lock (or the semaphore's places) by running workers, with their
        pids: a killed worker's hold, there until its lease ends, is not one."""
        from django_redis_lock import get_lock_manager
        from faults.worker import NAME

        pids, found = self.pids(), []
        for info in get_lock_manager().holders(NAME):
            match = re.search(r"\bpid (\d+)", info.owner)
            if match is not None and int(match[1]) in pids:
                found.append((int(match[1]), info))
        return found

    def holder(self) -> tuple[int, float]:
        """Wait (bounded) until a worker holds the lock: its pid and the lease it has left."""

        def held_by_worker() -> tuple[int, float] | None:
            held = self.held_by_workers()
            return (held[0][0], held[0][1].ttl) if held else None

        found: tuple[int, float] = wait_for(held_by_worker, HOLDER_TIMEOUT, "a worker to hold")
        return found

    def _semaphore_full(self) -> bool:
        """Whether running workers hold every place of the semaphore variant's semaphore. A
        fault is injected from there, and the next one only once it holds again: recovery is
        "every place in use again", which a fault during the last one's recovery would delay."""
        places = [info for _, info in self.held_by_workers() if info.kind == "semaphore"]
        return len(places) >= SEMAPHORE_LIMIT

    def inject(self) -> tuple[Fault, int | None]:
        """Play the scenario's fault once; the fault and the pid it struck (holder faults)."""
        kind = self.scenario.fault
        plays: dict[str, Callable[[], tuple[float, str, int | None]]] = {
            "holder-kill": self._kill_holder,
            "holder-stop": self._stop_holder,
            "redis-freeze": self._freeze_redis,
            "redis-restart": self._restart_redis,
            "redis-restart-empty": self._restart_redis_empty,
            "failover": self._fail_over,
            "primary-kill": self._fail_over,
            "lock-primary-kill": self._kill_cluster_primary,
            "other-primary-kill": self._kill_cluster_primary,
            "quorum-primary-kill": self._kill_quorum_primaries,
            "quorum-primary-freeze": self._freeze_quorum_primary,
            "quorum-restart-after-ttl": self._restart_quorum_primary,
            "partition-reset": self._partition,
            "partition-hold": self._partition,
        }
        start, detail, victim = plays[kind]()
        end = time.monotonic()
        wall = time.time() - (end - start)
        return Fault(kind, start, end, wall, detail), victim

    def _kill_holder(self) -> tuple[float, str, int | None]:
        victim, _ = self.holder()
        start = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        index = next(i for i, p in self.workers.items() if p.pid == victim)
        self.workers[index].wait(timeout=STOP_SLACK)
        self.spawn(index)
        return start, f"pid {victim} killed while holding", victim

    def _stop_holder(self) -> tuple[float, str, int | None]:
        victim, ttl = self.holder()
        pause = ttl + 0.05  # just past its lease: the next holder is mid-section on waking
        start = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        time.sleep(pause)  # the fault itself: how long the holder stays stopped
        os.kill(victim, signal.SIGCONT)
        return start, f"pid {victim} stopped {pause:.2f} s (its lease had {ttl:.2f} s left)", victim

    def _freeze_redis(self) -> tuple[float, str, int | None]:
        server = self.topology.primary()
        start = time.monotonic()
        server.pause()
        time.sleep(self.freeze)  # the fault itself
        server.resume()
        return start, f"redis-server stopped (SIGSTOP) for {self.freeze:g} s", None

    def _restart_redis(self) -> tuple[float, str, int | None]:
        server = self.topology.primary()
        start = time.monotonic()
        server.kill()
        time.sleep(1.0)  # the fault itself: down for a second
        server.start()
        return start, "redis-server killed (SIGKILL), restarted after 1 s", None

    def _restart_redis_empty(self) -> tuple[float, str, int | None]:
        """Stop a holder (SIGSTOP) while it holds; SIGKILL Redis, start it again at once with
        nothing on disk; resume the holder once another worker was granted the lock."""
        victim, ttl = self._stopped_holder()
        server = self.topology.primary()
        start = time.monotonic()
        try:
            server.kill()
            server.start()

            def granted_again() -> bool:
                return any(pid != victim for pid, _ in self.held_by_workers())

            with contextlib.suppress(RuntimeError):  # the histories say what was granted
                wait_for(granted_again, HOLDER_TIMEOUT, "a grant by the empty Redis")
        finally:
            os.kill(victim, signal.SIGCONT)
        detail = (
            f"pid {victim} stopped (SIGSTOP) while holding, {ttl:.2f} s of its lease left; "
            "redis-server killed (SIGKILL) and started again at once, empty; the holder "
            f"resumed {time.monotonic() - start:.2f} s later, once another worker held the lock"
        )
        return start, detail, None

    def _stopped_holder(self) -> tuple[int, float]:
        """SIGSTOP a worker that holds the lock, as its own history says (an acquire answered,
        not yet released): its pid and the lease it had left (bounded: another one is tried
        if that one was releasing)."""
        from faults.histories import holds_now

        deadline = time.monotonic() + HOLDER_TIMEOUT
        while True:
            victim, ttl = self.holder()
            os.kill(victim, signal.SIGSTOP)
            if holds_now(self.directory / HISTORY, victim):
                return victim, ttl
            os.kill(victim, signal.SIGCONT)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no holder stopped while holding in {HOLDER_TIMEOUT:g} s")

    def _fail_over(self) -> tuple[float, str, int | None]:
        topology = self.topology
        assert isinstance(topology, Sentinel)
        old = topology.primary().port
        start = time.monotonic()
        if self.scenario.fault == "failover":
            new, action = topology.failover(), "SENTINEL FAILOVER"
        else:
            new, action = topology.kill_primary(), "primary killed (SIGKILL)"
        return start, f"{action}: primary {old} -> {new.port}", None

    def _kill_cluster_primary(self) -> tuple[float, str, int | None]:
        topology = self.topology
        assert isinstance(topology, Cluster)
        from faults.worker import lock_key

        serving = self.scenario.fault == "lock-primary-kill"
        key = lock_key() if serving else topology.key_elsewhere()
        listeners = pubsub_clients(topology.cluster.primary_of(key))
        start = time.monotonic()
        old, new = topology.kill_primary(key)
        whose = "the lock's primary" if serving else "another primary"
        detail = f"{whose} killed (SIGKILL, port {old.port}, {listeners} listeners on it)"
        return start, f"{detail}: replica {new.port} took over", None

    def _settled_hold(self, besides: str = "") -> tuple[Quorum, QuorumHold]:
        """The quorum, and a hold (not the one of secret ``besides``) once every running
        primary has it: settled, not being granted or released (bounded wait)."""
        topology = self.topology
        assert isinstance(topology, Quorum)

        def everywhere() -> QuorumHold | None:
            hold = topology.hold()
            running = [server for server in topology.servers if server.running]
            if hold is None or hold.secret == besides or len(hold.servers) != len(running):
                return None
            return hold

        hold: QuorumHold = wait_for(everywhere, HOLDER_TIMEOUT, "a hold on every running primary")
        return topology, hold

    def _stop_quorum_holder(self, besides: str) -> tuple[int, QuorumHold]:
        """SIGSTOP the worker of a settled hold (not ``besides``) while it holds: its pid and
        the hold as the stop left it (bounded: another hold is tried if that one was ending)."""
        deadline = time.monotonic() + HOLDER_TIMEOUT
        while True:
            topology, hold = self._settled_hold(besides)
            match = re.search(r"\bpid (\d+)", hold.owner)
            pid = int(match[1]) if match else 0
            if pid in self.pids():
                os.kill(pid, signal.SIGSTOP)
                stopped = topology.hold()
                if stopped is not None and stopped.secret == hold.secret:
                    return pid, stopped
                os.kill(pid, signal.SIGCONT)  # stopped as its hold ended: another one
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no holder stopped while holding in {HOLDER_TIMEOUT:g} s")

    def _kill_quorum_primaries(self) -> tuple[float, str, int | None]:
        topology, hold = self._settled_hold()
        turn = len(self.faults)  # another pair at each repeat
        victims = [hold.servers[(turn + k) % len(hold.servers)] for k in range(2)]
        start = time.monotonic()
        for server in victims:
            topology.kill(server)
        topology.heal()  # waits until they have been down for longer than the lease
        ports = ", ".join(str(server.port) for server in victims)
        detail = (
            f"two of {topology.size} primaries holding the lock killed (SIGKILL, ports "
            f"{ports}), restarted empty after {topology.restart_after:g} s"
        )
        return start, detail, None

    def _freeze_quorum_primary(self) -> tuple[float, str, int | None]:
        _, hold = self._settled_hold()
        server = hold.servers[len(self.faults) % len(hold.servers)]
        start = time.monotonic()
        server.pause()
        time.sleep(self.freeze)  # the fault itself
        server.resume()
        detail = f"a primary holding the lock stopped (SIGSTOP, port {server.port})"
        return start, f"{detail} for {self.freeze:g} s", None

    def _restart_quorum_primary(self) -> tuple[float, str, int | None]:
        """Two primaries down; a hold granted by the three left, its holder stopped within
        its lease; the two back (empty, they never had it); one of the three killed: the
        hold is on two of five, the others can only make two more. The holder goes on
        within its lease; the killed one restarts empty once down for longer than the lease:
        no other worker may take the lock while the stopped one holds it."""
        topology, before = self._settled_hold()
        turn = len(self.faults)
        down = [before.servers[(turn + k) % len(before.servers)] for k in range(2)]
        start = time.monotonic()
        for server in down:
            topology.kill(server)
        holder, hold = self._stop_quorum_holder(besides=before.secret)
        stopped = time.monotonic()
        resume_at = stopped + hold.lease_ms / 2000  # halfway through the lease it had left
        victim = hold.servers[turn % len(hold.servers)]
        try:
            for server in down:
                topology.restart(server)
            topology.kill(victim)
            # the fault itself: the holder resumes, the killed primary restarts once down for
            # restart_after (later: it is longer than the lease), each at its moment
            schedule = [
                (resume_at, partial(os.kill, holder, signal.SIGCONT)),
                (time.monotonic() + topology.restart_after, partial(topology.restart, victim)),
            ]
            for moment, act in sorted(schedule, key=lambda item: item[0]):
                time.sleep(max(0.0, moment - time.monotonic()))
                act()
        finally:
            os.kill(holder, signal.SIGCONT)
        detail = (
            f"two of {topology.size} primaries killed (SIGKILL) and restarted empty; the holder "
            f"(pid {holder}) of a hold the three others granted stopped (SIGSTOP) for "
            f"{resume_at - stopped:.2f} s of the {hold.lease_ms / 1000:.2f} s its lease had "
            f"left; one of the three killed (port {victim.port}) and restarted empty after "
            f"{topology.restart_after:g} s"
        )
        return start, detail, None

    def _partition(self) -> tuple[float, str, int | None]:
        """Cut every proxy of the partition topology and heal it (see :func:`cut_and_heal`)."""
        topology = self.topology
        assert isinstance(topology, Partition)
        mode = self.scenario.fault.removeprefix("partition-")
        start, detail = cut_and_heal(topology, mode, self.cut, self.marks)
        return start, detail, None

    def _rejoin(self, store: Store, fault: Fault) -> None:
        """After a partition's heal: wait (bounded) until the sentinels demoted the old
        primary, every replica is in sync, and a worker that follows the sentinels has
        written again; note when the old primary was demoted."""
        topology = self.topology
        assert isinstance(topology, Partition)
        demoted = topology.wait_demoted()
        if demoted is not None:
            self.marks["demoted"] = demoted
        with contextlib.suppress(TimeoutError):  # the checker reports what did not recover
            topology.wait_whole()
        since = max(fault.end, demoted or 0.0)
        sentinel_side = [i for i in self.workers if not topology.old_side(i)]

        def written() -> bool:
            row = store.connection.execute(
                "SELECT 1 FROM sections WHERE accepted AND start >= ? AND worker IN "
                f"({', '.join('?' * len(sentinel_side))}) LIMIT 1",
                (since, *sentinel_side),
            ).fetchone()
            return row is not None

        with contextlib.suppress(RuntimeError):
            wait_for(written, REJOIN_TIMEOUT, "a section on the Sentinel side")

    # -- the run -------------------------------------------------------------------------------

    def play(self) -> Outcome:
        """Start everything, inject the faults, stop everything; what the store recorded."""
        from django.test.utils import override_settings

        started = time.monotonic()
        create(self.store_path)
        store = Store(self.store_path)
        self.topology.start()
        try:
            s = self.scenario
            settings = self.topology.settings(s.socket_timeout, s.wait_replicas)
            for index in range(WORKERS):
                self.envs[index] = {
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": "faults.settings",
                    "FAULTS_SETTINGS": json.dumps(self.worker_settings(index)),
                    "PYTHONPATH": str(ROOT),
                }
            with override_settings(**settings):
                for index in range(WORKERS):
                    self.spawn(index)
                try:
                    self._faults(store)
                finally:
                    hung = self.stop_workers(store)
        finally:
            self.topology.stop()
        outcome = Outcome(s, self.store_path, self.faults, hung, time.monotonic() - started)
        outcome.counter = store.counter()
        outcome.marks = self.marks
        if isinstance(self.topology, Partition):
            outcome.old_side = frozenset(filter(self.topology.old_side, range(WORKERS)))
        store.close()
        return outcome

    def _both_sides(self, store: Store, since: float) -> bool:
        """Whether workers of both sides of a partition wrote since ``since``."""
        assert isinstance(self.topology, Partition)
        rows = store.connection.execute(
            "SELECT DISTINCT worker FROM sections WHERE accepted AND start >= ?", (since,)
        )
        sides = {self.topology.old_side(row[0]) for row in rows}
        return sides == {True, False}

    def worker_settings(self, index: int) -> dict[str, Any]:
        """Worker ``index``'s settings: those of its side of a partition, else everyone's."""
        s = self.scenario
        if isinstance(self.topology, Partition):
            return self.topology.worker_settings(index, s.socket_timeout, s.wait_replicas)
        return self.topology.settings(s.socket_timeout, s.wait_replicas)

    def _faults(self, store: Store) -> None:
        def sections_since(moment: float, besides: int | None = None) -> bool:
            row = store.connection.execute(
                "SELECT 1 FROM sections WHERE accepted AND start >= ? AND pid != ? LIMIT 1",
                (moment, besides or 0),
            ).fetchone()
            return row is not None

        ready = time.monotonic()
        wait_for(lambda: sections_since(ready - START_TIMEOUT), START_TIMEOUT, "a first section")
        partitioned = isinstance(self.topology, Partition)
        for _ in range(1 if partitioned else self.repeats):  # one partition: it demotes P
            steady = time.monotonic()
            before = partial(sections_since, steady)
            wait_for(before, RECOVERY_TIMEOUT, "sections before a fault")
            if self.scenario.variant == SEMAPHORE:  # recovery is "every place taken again"
                wait_for(self._semaphore_full, RECOVERY_TIMEOUT, "every place of the semaphore")
            if partitioned:  # and of both sides
                wait_for(partial(self._both_sides, store, steady), RECOVERY_TIMEOUT, "both sides")
            fault, victim = self.inject()
            self.faults.append(fault)
            store.fault(fault.kind, fault.start, fault.end, fault.detail)
            after = partial(sections_since, fault.end if victim is None else fault.start, victim)
            with contextlib.suppress(RuntimeError):  # the checker reports a missing recovery
                wait_for(after, RECOVERY_TIMEOUT, "recovery")
                if self.scenario.variant == SEMAPHORE:
                    wait_for(self._semaphore_full, RECOVERY_TIMEOUT, "every place again")
            self.topology.heal()
            if partitioned:
                self._rejoin(store, fault)
        time.sleep(1.0)  # a last second of normal work after the last recovery


def cut_and_heal(
    topology: Partition, mode: str, cut: float, marks: dict[str, float]
) -> tuple[float, str]:
    """Cut every proxy of ``topology`` ("reset" or "hold"), wait (bounded) until the sentinels
    promoted a replica, keep the cut for ``cut`` s in all, heal it; when the cut began and the
    fault's description. Notes in ``marks`` when the sentinels promoted and when it healed."""
    start = time.monotonic()
    topology.cut(mode)
    try:
        new = topology.wait_promoted()
        marks["promoted"] = topology.promoted_at
        time.sleep(max(0.0, start + cut - time.monotonic()))  # the fault itself
    finally:
        topology.reconnect()
        marks["healed"] = topology.healed_at
    promoted = marks["promoted"] - start
    detail = (
        f"{topology.describe()}: a {mode} cut of {time.monotonic() - start:.1f} s; the "
        f"sentinels promoted {new.port} {promoted:.1f} s into it"
    )
    if topology.repromoted:
        detail += ", after another replica they had promoted first"
    return start, detail


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A temporary directory for a scenario's store and logs."""
    with tempfile.TemporaryDirectory(prefix="django-redis-lock-faults-") as name:
        yield Path(name)
