"""The leadership scenarios' checker: what the store recorded against what the docs promise.

Figures per scenario: the children (each started with an epoch by a supervisor that led), the
writes accepted and refused, *late* writes accepted (an epoch below that of a child already
started when the write committed: an orphan's or a resumed child's, before the new epoch wrote
anything, which fencing cannot know of), *stale* writes accepted (an epoch below one the store
had accepted: never allowed), after a stop the stopped child's writes accepted once it was
resumed (never allowed: it is resumed only after the new leader wrote), the *current overlaps*
(two children at once that both held a current epoch: an epoch is current from its child's
start until a child with a higher one starts, so two such children are two of one epoch, or a
child started after one with a higher epoch), the seconds in which two children ran at once
(a current one and a deposed one: allowed after a kill or a stop, never at a hand-over), and
the time from each fault to the start of the next leader's child against the scenario's bound.
And the children's history (faults/leader_history.py), checked for linearizability against the
``leader`` model (faults/history/): not linearizable, or empty, is a violation.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from faults.check import two_holders
from faults.history import Malformed, check_file
from faults.leader import LeaderOutcome
from faults.store import Event, Section, Store


@dataclass(frozen=True)
class Child:
    """A supervised child as the store saw it: its epoch, and when it ran (monotonic)."""

    pid: int
    worker: int
    epoch: int
    start: float
    end: float


@dataclass
class LeaderResult:
    """The checked figures of one leadership scenario."""

    outcome: LeaderOutcome
    children: int = 0
    sections: int = 0
    refused: int = 0
    late_accepted: int = 0
    stale_accepted: int = 0
    resumed_accepted: int | None = None  # leader-stop only
    current_overlaps: int = 0
    two_children: float = 0.0
    takeovers: list[float | None] = field(default_factory=list)
    hangs: int = 0
    # The history's verdict, as ``check-history`` ends: "linearizable: N operations", or why not.
    history: str = ""
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when nothing the documentation does not allow was seen."""
        return not self.violations


def children(sections: list[Section], events: list[Event], until: float) -> list[Child]:
    """The children, from their start records to their stop or exit (else their last write,
    else ``until``: one that died without a record), by start."""
    found = []
    ends = {e.pid: e.at for e in events if e.kind in ("child-stop", "child-exit")}
    last = {s.pid: s.end for s in sections}
    for event in events:
        if event.kind == "child-start":
            end = ends.get(event.pid, last.get(event.pid, until))
            epoch = int(event.detail.removeprefix("epoch "))
            found.append(Child(event.pid, event.worker, epoch, event.at, end))
    return sorted(found, key=lambda c: c.start)


def check(outcome: LeaderOutcome, *, demand_bounds: bool = True) -> LeaderResult:
    """Compute every figure of ``outcome`` and the violations; a takeover past the scenario's
    bound fails only with ``demand_bounds`` (a short run reports it)."""
    result = LeaderResult(outcome)
    store = Store(outcome.store)
    try:
        sections, events = store.sections(), store.events()
    finally:
        store.close()
    until = max([s.end for s in sections] + [e.at for e in events], default=0.0)
    kids = children(sections, events, until)
    result.children = len(kids)
    accepted = [s for s in sections if s.accepted]
    result.sections, result.refused = len(accepted), len(sections) - len(accepted)
    highest = 0
    for section in accepted:  # commit order
        result.stale_accepted += section.token < highest
        highest = max(highest, section.token)
        newer = [c for c in kids if c.epoch > section.token and c.start <= section.end]
        result.late_accepted += bool(newer)
    result.current_overlaps = sum(
        1 for before, after in itertools.pairwise(kids) if after.epoch <= before.epoch
    )
    result.two_children = two_holders(kids)
    for fault, epoch in zip(outcome.faults, outcome.struck, strict=True):
        starts = [c.start for c in kids if c.epoch > epoch and c.start >= fault.start]
        result.takeovers.append(min(starts) - fault.start if starts else None)
    if outcome.scenario.fault == "leader-stop":
        result.resumed_accepted = sum(
            1
            for fault, epoch in zip(outcome.faults, outcome.struck, strict=True)
            for s in accepted
            if s.token == epoch and s.end >= fault.end
        )
    result.hangs = len(outcome.hung_at_stop)
    result.violations = _violations(result, demand_bounds)
    if outcome.history is not None:
        result.history, wrong = history_verdict(outcome.history)
        result.violations += wrong
    return result


def history_verdict(path: Path) -> tuple[str, list[str]]:
    """The verdict of the history at ``path`` under the leader model, and the violations it
    makes: none, or one (not linearizable, malformed, or no operation at all)."""
    try:
        verdict = check_file(path, "leader")
    except Malformed as exc:
        return f"malformed: {exc}", [f"history malformed: {exc}"]
    line = verdict.last_line()
    if not verdict.linearizable:
        return line, [f"history {line}"]
    if not verdict.operations:
        return line, ["history: no operation recorded"]
    return line, []


def _violations(result: LeaderResult, demand_bounds: bool) -> list[str]:
    scenario = result.outcome.scenario
    found = []
    if result.sections == 0:
        found.append("no write accepted")
    if result.stale_accepted:
        found.append(f"{result.stale_accepted} stale writes accepted")
    if result.resumed_accepted:
        found.append(f"{result.resumed_accepted} writes of the resumed leader accepted")
    if result.current_overlaps:
        found.append(f"{result.current_overlaps} children with a current epoch at once")
    if scenario.fault == "supervisor-term" and result.two_children > 0:
        found.append(f"two children ran for {result.two_children:.3f} s at a hand-over")
    if result.hangs:
        found.append(f"{result.hangs} hangs")
    for seconds in result.takeovers:
        if seconds is None:
            found.append("no new leader's child after a fault")
        elif demand_bounds and scenario.bound is not None and seconds > scenario.bound:
            found.append(f"takeover {seconds:.2f} s > {scenario.bound:.2f} s")
    return found


COLUMNS = (
    "scenario",
    "lease s",
    "children",
    "writes",
    "refused",
    "late acc.",
    "stale acc.",
    "resumed acc.",
    "current overlaps",
    "two children s",
    "takeover p50 s",
    "takeover max s",
    "bound s",
    "hangs",
    "history",
    "verdict",
)


def row(result: LeaderResult) -> list[str]:
    """The table row of a result."""
    scenario = result.outcome.scenario
    takeovers = [t for t in result.takeovers if t is not None]
    missing = len(result.takeovers) - len(takeovers)
    longest = f"{max(takeovers):.2f}" if takeovers else "-"
    if missing:
        longest += f" ({missing} none)"
    over = scenario.bound is not None and any(t > scenario.bound for t in takeovers)
    return [
        scenario.name,
        f"{scenario.lease:g}",
        str(result.children),
        str(result.sections),
        str(result.refused),
        str(result.late_accepted),
        str(result.stale_accepted),
        "-" if result.resumed_accepted is None else str(result.resumed_accepted),
        str(result.current_overlaps),
        f"{result.two_children:.2f}",
        f"{statistics.median(takeovers):.2f}" if takeovers else "-",
        longest + (" OVER" if over else ""),
        "-" if scenario.bound is None else f"{scenario.bound:.2f}",
        str(result.hangs),
        history_cell(result.history),
        "ok" if result.passed else "FAIL",
    ]


def history_cell(verdict: str) -> str:
    """A verdict, short enough for a table's cell: "linearizable (N ops)", or its first words."""
    if verdict.startswith("linearizable: "):
        return f"linearizable ({verdict.split()[1]} ops)"
    return verdict.split(",")[0] or "-"
