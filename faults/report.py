"""docs/faults.rst: the fault suite's figures, what the documentation promises and what was seen."""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

from faults import leader_check, unique, unique_app
from faults.check import COLUMNS, PARTITION_COLUMNS, Result, partition_row, partitioned, row
from faults.histories import HistoryCheck
from faults.history_report import history_section
from faults.leader import GRACE, HANDOVER_BOUND, HANDOVER_LEASE, NAME, SUPERVISORS
from faults.scenarios import BLOCKING_TIMEOUT, LEASE, SOCKET_TIMEOUT, WORK, WORKERS
from faults.topologies import PARTITION_DOWN_AFTER_MS, PARTITION_SENTINELS, SENTINEL_TIMEOUT
from faults.unique import UniqueResult
from testproject.redis_server import find_redis_server

ROOT = Path(__file__).resolve().parent.parent
PATH = ROOT / "docs" / "faults.rst"

INTRO = f"""\
=====================
Fault-injection suite
=====================

Written by ``python3 dev.py faults --write``; ``bash .ci/run`` runs ``python3 dev.py faults
--short``, which fails on anything the documentation does not allow. Each scenario starts its own
Redis deployment on loopback ports and a SQLite store in a temporary directory; {WORKERS} worker
processes loop on ``with lock("faults:counter", timeout={LEASE:g}, blocking_timeout=\
{BLOCKING_TIMEOUT:g})``, work {WORK:g} s inside the section and write the store with the hold's
fencing token through the ORM, ``fenced_update(Counter.objects.filter(name=...), hold,
value=F("value") + 1)``: one ``UPDATE ... WHERE token <= ?`` (the *fenced* variant), or the
value read at the start of the section plus one (the *read-write* variant). Each write and its
section (times, token, accepted or refused) are recorded in the store's own transaction. A
controller injects the faults for real (SIGKILL or SIGSTOP of the worker that holds the lock,
SIGSTOP or SIGKILL and restart of redis-server, ``SENTINEL FAILOVER`` or SIGKILL of the primary,
SIGKILL of a cluster primary, the lock's or another, restarted once a replica took over and the
workers recovered, SIGKILL or SIGSTOP of primaries of a quorum) and every wait is bounded. The
cache has a {SOCKET_TIMEOUT:g} s socket timeout unless the scenario says otherwise; the single
server keeps an append-only file synced at every write, so a restart keeps its locks (but in
``redis-restart-empty``, the unsafe setting the documentation warns of: nothing on disk). The
cluster (three primaries with a replica each, node timeout 1 s) is reached through
django-valkey's ``ClusterValkeyCache``. The quorum is five independent redis-servers that keep
nothing on disk, one django-redis cache alias each, which ``REDIS_LOCK["CACHE"]`` lists; a
killed one restarts empty once it has been down for longer than the lease, as Redlock requires.
The partition scenarios cut a Sentinel deployment in two with TCP proxies of the suite's own
(``faults/proxy.py``, on loopback), and put clients on both sides: see `Partitions`_. The
*semaphore* scenarios' workers take one of the two places of ``semaphore("faults:counter", 2)``
instead of the lock and write unfenced (two holders write side by side): there *overlaps* counts
the sections that began while two others were in progress (past the limit), and *recovery s* the
time from the fault until both places were in use again. The *rwlock* scenarios' workers take
``rwlock("faults:counter")``, as a reader (they read the counter) or as the writer (they read it
and write the value read plus one, fenced), one pass in two of each on average. Every worker
also records its operations for the linearizability checker: see `Histories`_.

Columns: *sections* accepted writes; *refused* writes the fence refused; *overlaps* pairs of
sections intersecting in time, as the store saw them; *late acc.* writes accepted after another
worker had started its section (a paused holder's); *stale acc.* writes accepted with a token
below one accepted before (never allowed); *lost upd.* accepted increments missing from the
counter; *unavail.* ``LockUnavailable`` raised (acquire or release); *rel. failed* of them,
releases; *recovery s* the longest time from a fault (a holder fault's start, a Redis fault's
end) to the next section of another worker; *pause s* the longest stretch with no accepted
section in progress that meets a fault (a cluster kill lasts until the cluster is whole
again); *hangs* a worker silent for longer than a pass may take, faults included, or not
stopping when told.
"""

PARTITIONS = f"""\
Partitions
----------

Each partition scenario starts a primary, two or three replicas and {PARTITION_SENTINELS}
sentinels, with the suite's TCP proxy (``faults/proxy.py``: asyncio, in a thread of the
controller, 127.0.0.1 only) where the partition cuts:

- the sentinels reach the primary only through its proxy (they monitor the proxy's address,
  and the primary announces it with ``replica-announce-port`` for when it has become a
  replica), and so do the replicas on the sentinels' side, which replicate through it;
- a replica *left on the old primary's side* (``left1``) replicates from it directly, and the
  sentinels reach it through a proxy of its own, which it announces.

Half of the workers use a plain django-redis cache pointed straight at the primary: clients the
partition leaves with the old primary. The other half follow the sentinels as the documentation
configures them (django-redis's ``SentinelClient``, sentinel socket timeout {SENTINEL_TIMEOUT:g} s);
all of them take the same lock and write the same store. The controller cuts every proxy at
once, in one of two ways: *reset* (every connection is closed
with an RST, and new ones are accepted and reset at once) or *hold* (connections stay open but
nothing passes either way: the proxy stops reading, and new connections are accepted but not
forwarded). The sentinels flag the primary down and promote a replica on their side; the cut
lasts the run's partition length in all, then every proxy forwards again (held data first),
and the controller waits, each wait bounded, until the sentinels have demoted the old primary,
every replica is in sync and a Sentinel-side worker wrote again. One cut per scenario: the
demoted primary no longer serves the clients pinned to it. Names: ``r2``/``r3`` replicas,
``left1`` one of them on the old primary's side, ``reset``/``hold`` the cut, ``wait-N``
``WAIT_REPLICAS``.

The sentinels flag a server down after {PARTITION_DOWN_AFTER_MS / 1000:g} s: with the other
Sentinel scenarios' 1 s (Sentinel's ping period) they sometimes flagged the replica they had
just promoted down and promoted another. They run with ``parallel-syncs`` equal to the
replicas, so that every replica they
reach follows the promoted one at once (with the default, one at a time, a replica behind a
held connection takes the only turn and the others wait for the failover's timeout), and with
a failover timeout of 2 s while a cut lasts and 600 s otherwise: a sentinel points a replica
that follows another address than the primary's as the sentinels know it at that address once
a failover timeout has passed, and the replica left on the old primary's side must keep
replicating from it directly.

Columns: *cut* how and how long; *promoted s* from the cut until every sentinel named the new
primary; *two holders s* the seconds in which at least two sections were in progress at once;
*refused* stale writes the fence refused; *tokens back* sections whose token was not above
that of the section started before; *deposed grants* sections of the old primary's side whose
token was granted after the cut (a token is the server's clock in microseconds): holds the old
primary granted that no replica on the sentinels' side ever had, all discarded when it
resynchronised from the new primary; *Sentinel side out s* the longest stretch that meets
the cut in which no worker that follows the sentinels held the lock (it may last past the
heal); *demoted s* from the heal until the sentinels had made the old primary a replica;
*shows* what the scenario is there to show
happening (a long run fails a scenario that did not; a short run reports it): *overlaps*,
*lost-updates*, *deposed-grants*, and *lockout* (no worker that follows the sentinels started a
section from the promotion until the heal).

What the figures come from:

- Without ``WAIT_REPLICAS`` both primaries grant from the promotion until the old one is
  demoted, about 10 s after the heal (the sentinels convert a primary that answers again once
  it has answered for 8 s, at their next look at it). Fencing hardly separates the two holders:
  a token is the granting server's clock in microseconds, both primaries run on one clock
  here, so their tokens interleave in the order of the grants and the store accepts nearly
  every write of both sides; it refuses one only when a write overtakes one granted later.
  With a read-then-write the overlapping holders lose updates.
- With ``WAIT_REPLICAS = 1`` and both replicas on the sentinels' side the old primary has no
  replica to acknowledge a grant from the cut on (``LockNotReplicated``, given back at once),
  so the new primary's grants meet no other holder.
- With three replicas, one left on the old primary's side, ``WAIT_REPLICAS = 1`` is met on both
  sides; ``WAIT_REPLICAS = 2`` on neither until the heal (hold) or the demotion (reset).
- With two replicas, one left on the old primary's side, ``WAIT_REPLICAS = 1`` is met only
  there: the Sentinel side has a primary and no lock, and the old primary's acknowledged grants
  are discarded at its demotion. A hold it granted a moment before can still be in progress
  when the new primary's first grant is confirmed (two holders, briefly); and as that grant
  waited for a replica, its token (the clock when its script ran) can be older than the old
  primary's last one, so the store refuses its write (*tokens back*, *refused*).
- A *hold* cut keeps the sentinels' connections open: what they send meanwhile, such as the
  ``REPLICAOF`` that points the replica left on the old primary's side at the new one, may be
  delivered at the heal, and that replica then leaves the old primary at once. After a *reset*
  cut it stays with the old primary until the old primary is demoted, which grants
  acknowledged holds until then.
"""

EXPLAINED = """\
What fencing protects, and why the documentation's example uses ``F()``
-----------------------------------------------------------------------

In the holder-stop scenarios the worker holding the lock is stopped (SIGSTOP) until just past
the end of its lease, so the next worker takes the lock and starts its section; then the
stopped one resumes and writes. Its token is older, but the store has not yet accepted the
newer one, so its write is *accepted* (the *late acc.* column), and the next holder's write,
with a higher token, is accepted after it. The fence did its job: no write older than an
accepted one got in (*stale acc.* is 0). What happens to the data depends on how the write is
made:

- *fenced* (``F("value") + 1``, computed by the store): both increments count. Nothing is
  lost.
- *read-write* (read at the start of the section, write ``read + 1``): the next holder read the
  value before the stopped one wrote, so its write overwrites that increment: a lost update
  (*lost upd.*), reported, not failed, because fencing protects writes, not reads.

So a correctness lock needs both: fencing tokens checked by the store, and writes that the
store computes from its current data (``F()``, ``UPDATE ... SET x = x + ?``) or that carry
their own check (compare-and-set on the value read).

Unfinished releases after a Redis freeze
----------------------------------------

In the redis-freeze and redis-restart scenarios the holder's release fails (*rel. failed*)
while Redis is stopped or down. A first fault run saw such holds stay until their lease ended
(up to 8 s of nobody holding after a 7 s freeze). Here *recovery s* shows how long after Redis
came back the next worker held the lock: the watchdog finishes the release as soon as Redis
answers (after a freeze, the release that waited in Redis's socket also runs on resume), well
within a second, not at the end of the lease.

A restart without persistence
-----------------------------

``redis-restart-empty`` plays what the documentation warns of (the Production and
Topologies pages): a Redis that keeps nothing on disk, killed and started again while a worker
holds the lock. The holder is stopped (SIGSTOP) while it holds, so that its section outlasts
the restart as a longer one would; the empty Redis grants the lock to another worker at once,
well within the first one's lease; the holder resumes, writes (the fence accepts or refuses it
by its token) and finds its hold gone. The sections overlap, and the mutex history is not
linearizable: a second holder granted while the first one's lease could not have run out.

A killed cluster primary
------------------------

``cluster-primary-kill`` kills the primary that serves the lock's slot: every call on the lock
fails with ``LockUnavailable`` (connection refused, at once) until the other nodes flag it
failed after the node timeout and elect its replica. The holder's release fails too and is
finished by the watchdog on the new primary, where it may hand the lock to the queue entry of
a waiter that gave up while the primary was down: nobody uses that grant, so the lock stays
held until the entry's lease ends, and the live waiters try again at the end of their wait
slice. That is why *recovery s* can reach seconds after the cluster is whole, and the bound
is the lease plus the blocking timeout, not the node timeout alone. With sharded wake-ups (the
scenario's options say which way its workers' waiters were woken) the workers' listeners are
subscribed on that primary: they subscribe again on the replica once it serves the slot, and
the release there wakes the waiter it hands the lock to.

``cluster-other-primary-kill`` kills a primary that does not serve the lock, the one the
workers' wake-up listeners are subscribed on when it is one (with classic wake-ups, which
listen on any node; sharded ones listen on the lock's primary). With Redis's default
``cluster-require-full-coverage yes`` every node, the lock's own primary included, refuses
commands (``CLUSTERDOWN``) from the moment the failed primary is flagged until its replica is
elected, so sections pause for about that long (*pause s*). In
``cluster-other-primary-kill-partial`` the nodes run with ``cluster-require-full-coverage no``:
sections go on through the failure, and classic listeners move to another node.

Quorum locks
------------

``quorum-primary-kill`` kills two of the five primaries while they hold the lock: the other
three are a majority, so sections go on at once (a killed primary refuses connections, and each
process then skips it for a second). ``quorum-primary-freeze`` stops one instead: a call waits
for it up to the socket timeout, then the process skips it, so sections pause about that long.

``quorum-restart-after-ttl`` is the case Redlock's delayed restarts are for. Two primaries are
down while a worker takes the lock from the other three; the worker is stopped (SIGSTOP) within
its lease, the two come back empty, and one of the three is killed: the hold is now on two of
five primaries, and the other workers can get only two grants more, not a majority. The stopped
worker resumes within its lease, writes and releases; the killed primary comes back empty only
once it has been down for longer than the lease, when nothing it granted can still be held.
Brought back at once instead, it would give the other workers a majority while the stopped one
still holds the lock: two holders (the suite sees them as overlapping sections).
"""


def _versions() -> str:
    names = ("Django", "redis", "django-redis", "valkey", "django-valkey")
    found = []
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name} {importlib.metadata.version(name)}")
    packages = ", ".join(found)
    server = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    redis_version = next((w[2:] for w in server if w.startswith("v=")), "unknown")
    return f"Python {platform.python_version()}, {packages}, Redis {redis_version}"


def _table(results: list[Result]) -> str:
    return _list_table(list(COLUMNS), [row(r) for r in results])


def _list_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for cells in [header, *rows]:
        lines.append(f"   * - {cells[0]}")
        lines.extend(f"     - {cell}" for cell in cells[1:])
    return "\n".join(lines)


def _scenarios(results: list[Result]) -> str:
    lines = ["Promised and seen", "-----------------", ""]
    for result in results:
        scenario = result.outcome.scenario
        faults = "; ".join(sorted({f.detail.split(" (")[0] for f in result.outcome.faults}))
        options = [f"topology {scenario.topology}", f"variant {scenario.variant}"]
        options.append(f"socket timeout {scenario.socket_timeout or 'none'}")
        options.append(f"WAIT_REPLICAS {scenario.wait_replicas}")
        if scenario.lease != LEASE:
            options.append(f"lease {scenario.lease:g} s")
        options += result.wake_ups  # a cluster's: "sharded wake-ups" (each worker's)
        seen = "as promised" if result.passed else "VIOLATED: " + "; ".join(result.violations)
        if result.missing:
            seen += f" (not seen: {', '.join(result.missing)})"
        recoveries = ", ".join(f"{r:.2f}" if r is not None else "none" for r in result.recoveries)
        pauses = ", ".join(f"{p:.2f}" for p in result.pauses if p is not None)
        lines += [
            f"``{scenario.name}`` ({', '.join(options)})",
            f"    Promised: {scenario.promise}.",
            f"    Faults: {len(result.outcome.faults)} ({faults}).",
            f"    Seen: {result.sections} sections, {result.overlaps} overlapping, "
            f"{result.late_accepted} late writes accepted, {result.lost_updates} lost updates, "
            f"{result.unavailable} LockUnavailable ({result.not_replicated} not replicated), "
            f"{result.busy} busy, {result.lost} lost holds, recovery {recoveries} s, "
            f"pauses {pauses} s{_partition_seen(result)}: {seen}.",
            "",
        ]
    return "\n".join(lines)


def _partition_seen(result: Result) -> str:
    """The partition figures of a result's "Seen", or nothing for other scenarios."""
    if not partitioned([result]):
        return ""
    out = "none" if result.sentinel_out is None else f"{result.sentinel_out:.1f} s"
    demoted = "not" if result.demoted_after is None else f"{result.demoted_after:.1f} s"
    return (
        f", {result.two_holders:.1f} s of two holders, {result.tokens_back} tokens back, "
        f"{result.deposed_grants} deposed grants, Sentinel side out {out}, demoted {demoted} "
        "after the heal"
    )


def _partition_table(results: list[Result]) -> str:
    cuts = partitioned(results)
    if not cuts:
        return ""
    title = "Partition figures (the wiring and the columns: `Partitions`_):"
    lines = [title, "", ".. list-table::", "   :header-rows: 1", ""]
    for cells in [list(PARTITION_COLUMNS), *(partition_row(r) for r in cuts)]:
        lines.append(f"   * - {cells[0]}")
        lines.extend(f"     - {cell}" for cell in cells[1:])
    return "\n".join([*lines, ""])


def write(
    results: list[Result],
    *,
    short: bool,
    freeze: float,
    cut: float,
    skipped: dict[str, str],
    leaders: list[leader_check.LeaderResult] | None = None,
    uniques: list[UniqueResult] | None = None,
    histories: dict[str, HistoryCheck] | None = None,
) -> Path:
    """Write docs/faults.rst from ``results`` and ``leaders``; its path. A part with no results
    (the lock scenarios' or the leadership scenarios', after LEADERSHIP_MARK) is kept as the
    file has it: a run of the leadership scenarios alone rewrites only their section.
    ``histories``: the histories' verdicts by scenario, published in each part."""
    histories = histories or {}
    existing = PATH.read_text() if PATH.exists() else ""
    existing, _, kept_uniques = existing.partition(UNIQUE_MARK)
    kept_main, _, kept_leaders = existing.partition(LEADERSHIP_MARK)
    main = _main_part(results, short, freeze, cut, skipped, histories) if results else kept_main
    if leaders:
        led = LEADERSHIP_MARK + _leadership(leaders, short)
    else:
        led = LEADERSHIP_MARK + kept_leaders if kept_leaders else ""
    text = main.rstrip("\n") + "\n\n" + led if led else main
    if uniques:
        text = text.rstrip("\n") + "\n\n" + UNIQUE_MARK + _unique(uniques, short)
    elif kept_uniques:
        text = text.rstrip("\n") + "\n\n" + UNIQUE_MARK + kept_uniques
    PATH.write_text(text)
    return PATH


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _machine() -> str:
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores; {_versions()}"


def _main_part(
    results: list[Result],
    short: bool,
    freeze: float,
    cut: float,
    skipped: dict[str, str],
    histories: dict[str, HistoryCheck],
) -> str:
    run = (
        "short run (one fault each: CI's scenarios and any named)"
        if short
        else "long run (three faults each, one partition each)"
    )
    parts = [
        INTRO,
        "This run",
        "--------",
        "",
        f"{_now()}, {run}, Redis freeze {freeze:g} s, partitions {cut:g} s; {_machine()}.",
        *(f"Not run: the {name} scenarios ({why})." for name, why in skipped.items()),
        "",
        _table(results),
        "",
        _partition_table(results),
        history_section(
            [(r.outcome.scenario, r.outcome.faults) for r in results], histories, short
        ),
        _scenarios(results),
        EXPLAINED,
        PARTITIONS,
    ]
    return "\n".join(parts)


#: Where the leadership scenarios' section begins (an RST comment, unseen in the page).
LEADERSHIP_MARK = ".. The leadership scenarios (faults/leader.py) from here on.\n"

LEADERSHIP = f"""
Leadership
----------

The leadership scenarios (``leader-*``, faults/leader.py) run {SUPERVISORS} supervisors, each
``manage.py locks lead {NAME} --timeout LEASE --grace {GRACE:g} -- python
faults/leader_child.py ...`` in a process group of its own, on one redis-server (the partition
ones on a Sentinel deployment). The child a supervisor starts while it leads records when it
started (its first statement) with its epoch (``DJANGO_REDIS_LOCK_EPOCH``), then loops: work
{WORK:g} s, write the counter with ``fenced_update(Counter.objects.filter(name=...), epoch,
value=F("value") + 1)``, the epoch as an int token, and record the write, accepted or refused,
in the same transaction; SIGTERM ends
it with a record. Once a supervisor leads, its child wrote and the others wait in the queue, the
controller strikes the leading supervisor:

- ``leader-kill``: SIGKILL of the supervisor alone. Its child is orphaned and goes on writing
  with its old epoch (as documented: the epoch protects the data); a follower leads once the
  lease has run out, at most the lease and one renewal period (a third of the lease) after the
  kill.
- ``leader-term``: SIGTERM, with a {HANDOVER_LEASE:g} s lease. The supervisor stops its child,
  then resigns: the follower leads at once, its child starting within {HANDOVER_BOUND:g} s.
- ``leader-stop``: SIGSTOP of the leader's whole group (supervisor and child) until a follower
  led and its child wrote; then the child is resumed first, and the supervisor once the child
  tried a write with its old epoch (resumed together, the supervisor can find the loss and stop
  its child before it writes). Every write of the resumed child must be refused.
- ``leader-partition-*``: the Sentinel deployment of the partition scenarios (see
  `Partitions`_, same names), one cut of the run's partition length. The supervisor started
  first leads before the others start, and is the only one on the old primary's side (a plain
  cache pointed straight at it); the other two follow the sentinels. The cut leaves the leader
  with the old primary; the controller waits, each wait bounded, until the sentinels demoted
  the old primary after the heal, a new epoch wrote and the old leader's child stopped. No
  bound on the takeover: it depends on the promotion and, with ``WAIT_REPLICAS``, on where
  the replicas are. A supervisor that follows the sentinels and exits on its own (a waiting
  supervisor exits on "Redis is unavailable") is started again at once, as a service manager
  would; the faults' description lists those exits.

Columns: *children* the children started; *writes* accepted; *refused* refused by the fence;
*late acc.* writes accepted with an epoch below that of a child already started (an orphan's
before the new epoch wrote anything: fencing cannot know of a grant the store has not seen);
*stale acc.* writes accepted with an epoch below one the store had accepted (never allowed);
*resumed acc.* writes of a stopped leader accepted once it was resumed (never allowed);
*current overlaps* two children at once that both held a current epoch, an epoch being current
from its child's start until a child with a higher one starts (never allowed: two children of
one epoch, or a child started after one with a higher epoch); *two children s* the seconds two
children ran at once (a current one and a deposed one: an orphan, a stopped leader's; never at a
hand-over); *takeover* from the fault to the start of the next leader's child, median and
longest over the faults (a long run fails one over *bound s*, a short run reports it); *hangs*
a process that did not stop when told; *history* the children's elections, writes and
resignations checked for linearizability under the ``leader`` model (faults/history/,
``python3 dev.py check-history FILE --model leader``). The same times over more runs, with a
1 s and a 3 s lease after a SIGKILL and a 30 s one at a hand-over: ``python3 dev.py bench
leader`` (bench/leader.py).
"""


def _leadership(leaders: list[leader_check.LeaderResult], short: bool) -> str:
    header, cells = list(leader_check.COLUMNS), [leader_check.row(r) for r in leaders]
    run = "short run (one fault each)" if short else "long run (three faults each)"
    lines = [LEADERSHIP, f"This run: {_now()}, {run}; {_machine()}.", ""]
    lines += [_list_table(header, cells), ""]
    for result in leaders:
        scenario = result.outcome.scenario
        seen = "as promised" if result.passed else "VIOLATED: " + "; ".join(result.violations)
        faults = "; ".join(f.detail for f in result.outcome.faults)
        takeovers = ", ".join(f"{t:.2f}" if t is not None else "none" for t in result.takeovers)
        lines += [
            f"``{scenario.name}`` (lease {scenario.lease:g} s)",
            f"    Promised: {scenario.promise}.",
            f"    Faults: {len(result.outcome.faults)} ({faults}).",
            f"    Seen: {result.children} children, {result.sections} writes accepted, "
            f"{result.refused} refused, {result.late_accepted} late, {result.stale_accepted} "
            f"stale, {result.current_overlaps} current overlaps, {result.two_children:.2f} s of "
            f"two children, takeovers {takeovers} s: {seen}.",
            "",
        ]
    return "\n".join(lines)


#: Where the unique-task scenarios' section begins (an RST comment, unseen in the page).
UNIQUE_MARK = ".. The unique-task scenarios (faults/unique.py) from here on.\n"

UNIQUE = f"""
Unique tasks
------------

The unique-task scenarios (``unique-*``, faults/unique.py) run {unique.WORKERS} real Celery
workers (solo pool, ``acks_late``, the broker's visibility timeout {unique_app.VISIBILITY} s)
on one redis-server (locks, broker and records on three databases) and {unique.PRODUCERS}
producer processes that enqueue, in turn, three ``@unique`` tasks on {unique.KEYS} keys: the
default (``until="executed"``), a debounce (``on_duplicate="replace"``) and a throttle
(``until="window", window={unique_app.WINDOW:g}``), each with its own task id, every
{unique.PAUSE:g} s, for {unique.PLAY:g} s a fault round (a long run plays three). A task's body
records its start and end and works {unique_app.WORK:g} s; the workers record each start before
the package decides, and each outcome (ran, ``Skipped``). A killed worker is started again at
once. Then the producers stop, the controller waits (bounded) until every task sent was run
or skipped, stops the workers and waits out the keys left.

- ``unique-worker-kill``: every {unique.KILL_EVERY:g} s the controller SIGKILLs a worker, the one
  running a task when there is one; its task is delivered again after the visibility timeout.
- ``unique-redelivery``: {unique.KILL_SHARE:.0%} of the default and debounced tasks are sent
  with ``kill=True``: their worker SIGKILLs itself right after the task ran and the package
  freed its key (its ``task_postrun``), before Celery acknowledges it: the task is delivered
  again, usually once a new task of its key was enqueued.

Columns: *enqueues* and *sent* (a new task; the others got the task holding the key); *runs*
task bodies started; *skipped* starts that reported ``Skipped``; *kills* workers SIGKILLed;
*killed runs* bodies cut by a kill; *redelivered* starts of a task started before, *redel.
skipped* of them ``Skipped``; *overlaps* two runs of one key (default, debounce) at once (a
killed run ends at its kill); *late debounced* a debounced task that started after a later
enqueue of its key had returned, before that one ended, was skipped or killed, and ran;
*last not run* a debounced key whose last enqueue never ran to its end; *inside window* two
throttled tasks of one key sent less than the window apart; *false dup.* a duplicate that got
an id no enqueue of its key had sent; *held past lease* a key still naming a killed worker's
task {unique.RUNNING_LEASE:g} s (its running lease) and {unique.LEASE_SLACK:g} s after the kill,
or left past its TTL once everything stopped.
"""


def _unique(uniques: list[UniqueResult], short: bool) -> str:
    header, cells = list(unique.COLUMNS), [unique.row(r) for r in uniques]
    run = "short run" if short else "long run (three fault rounds each)"
    lines = [UNIQUE, f"This run: {_now()}, {run}; {_machine()}.", ""]
    lines += [_list_table(header, cells), ""]
    for result in uniques:
        scenario = result.outcome.scenario
        seen = "as promised" if result.passed else "VIOLATED: " + "; ".join(result.violations)
        lines += [
            f"``{scenario.name}``",
            f"    Promised: {scenario.promise}.",
            f"    Seen: {seen}.",
            "",
        ]
    return "\n".join(lines)
