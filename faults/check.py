"""The checker: what each scenario's store recorded, against what the documentation promises.

Figures per scenario: sections (accepted and refused writes), overlapping sections (two
holders' sections intersecting in time, as the store saw them), stale writes accepted (a write
whose token is below one the store accepted before: never allowed), late writes accepted (a
write accepted after another worker had started its section: a paused holder's), lost updates
(accepted increments missing from the counter), LockUnavailable counts, time to recover (from
a fault's end, or a holder fault's start, to the next section of another worker), the longest
pause (a stretch with no accepted section in progress that meets a fault) and hangs
(a worker without a record for longer than a pass may take, faults included, or that did not
stop when told).

Partitions add: the seconds in which two holders held at once, sections whose token was not
above the one started before (tokens back), holds the deposed primary granted (sections of the
old primary's side whose token is from after the cut: all of them discarded with its data), the
longest stretch meeting the cut in which no worker that follows the sentinels held the lock,
and how long after the heal the sentinels demoted the old primary. A scenario's ``shows`` are
checked too.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from faults.scenarios import BLOCKING_TIMEOUT, WORK, Outcome
from faults.store import SEMAPHORE, SEMAPHORE_LIMIT, Event, Fault, Section, Store

HOLDER_FAULTS = ("holder-kill", "holder-stop")
# A worker's records may be this much further apart than a pass's bound before it is a hang.
HANG_SLACK = 3.0
UNAVAILABLE = ("unavailable", "release-unavailable", "not-replicated", "release-not-replicated")


@dataclass
class Result:
    """The checked figures of one scenario."""

    outcome: Outcome
    sections: int = 0
    refused: int = 0
    overlaps: int = 0
    late_accepted: int = 0
    stale_accepted: int = 0
    tokens_back: int = 0
    lost_updates: int = 0
    unavailable: int = 0
    release_failed: int = 0
    not_replicated: int = 0
    busy: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    recoveries: list[float | None] = field(default_factory=list)
    pauses: list[float | None] = field(default_factory=list)
    hangs: int = 0
    two_holders: float = 0.0
    deposed_grants: int = 0
    sentinel_out: float | None = None
    locked_out: bool = False
    demoted_after: float | None = None
    missing: list[str] = field(default_factory=list)  # what the scenario shows, not seen
    wake_ups: list[str] = field(default_factory=list)  # how the workers' waiters were woken
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when nothing the documentation does not allow was seen."""
        return not self.violations


def overlapping(sections: list[Section]) -> list[tuple[Section, Section]]:
    """Pairs of sections whose [start, end] intersect, the earlier-started first."""
    ordered = sorted(sections, key=lambda s: s.start)
    pairs = []
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.end:
                break
            pairs.append((first, second))
    return pairs


def past_limit(sections: list[Section], limit: int) -> int:
    """How many sections started while ``limit`` others were in progress (a semaphore's)."""
    moments = sorted([(s.start, 1) for s in sections] + [(s.end, -1) for s in sections])
    holders = excess = 0
    for _, change in moments:  # at a tie an end (-1) sorts first: touching is no overlap
        if change > 0 and holders >= limit:
            excess += 1
        holders += change
    return excess


def full_again(sections: list[Section], after: float, limit: int) -> float | None:
    """Seconds from ``after`` until ``limit`` sections were in progress at once again."""
    moments = sorted([(s.start, 1) for s in sections] + [(s.end, -1) for s in sections])
    holders = 0
    for moment, change in moments:
        holders += change
        if moment >= after and holders >= limit:
            return moment - after
    return None


class Span(Protocol):
    """Anything that ran from ``start`` to ``end`` (a section, a leader's child)."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...


def two_holders(sections: Sequence[Span]) -> float:
    """The seconds in which at least two sections (spans) were in progress at once."""
    moments = sorted([(s.start, 1) for s in sections] + [(s.end, -1) for s in sections])
    total, holders, since = 0.0, 0, 0.0
    for moment, change in moments:
        if holders >= 2:
            total += moment - since
        holders += change
        since = moment
    return total


def check(outcome: Outcome, *, demand_shows: bool = True) -> Result:
    """Compute every figure of ``outcome`` and the violations among them; a scenario that did
    not show what it is there to show fails only with ``demand_shows``."""
    result = Result(outcome)
    store = Store(outcome.store)
    try:
        sections, events = store.sections(), store.events()
    finally:
        store.close()
    accepted = [s for s in sections if s.accepted]
    result.sections = len(accepted)
    result.refused = len(sections) - len(accepted)
    if outcome.scenario.variant == SEMAPHORE:  # holders side by side, up to the limit
        result.overlaps = past_limit(sections, SEMAPHORE_LIMIT)
    else:
        pairs = overlapping(sections)
        result.overlaps = len(pairs)
        result.late_accepted = len({first.id for first, _ in pairs if first.accepted})
        highest = 0
        for section in accepted:  # commit order
            if section.token < highest:
                result.stale_accepted += 1
            highest = max(highest, section.token)
        by_start = sorted(sections, key=lambda s: s.start)
        result.tokens_back = sum(
            1 for before, after in itertools.pairwise(by_start) if after.token <= before.token
        )
    result.lost_updates = len(accepted) - outcome.counter[0]
    for event in events:
        if event.kind in UNAVAILABLE:
            result.unavailable += 1
            result.release_failed += event.kind.startswith("release-")
            result.not_replicated += "replicated" in event.kind
        elif event.kind == "busy":
            result.busy += 1
        elif event.kind == "lost":
            result.lost += 1
        elif event.kind == "error":
            result.errors.append(event.detail)
        elif event.kind == "ready" and event.detail not in ("", *result.wake_ups):
            result.wake_ups.append(event.detail)
    for fault in outcome.faults:
        victim = re.search(r"\bpid (\d+)", fault.detail) if fault.kind in HOLDER_FAULTS else None
        after = fault.start if victim else fault.end
        starts = [
            s.start
            for s in accepted
            if s.start >= after and (victim is None or s.pid != int(victim[1]))
        ]
        if outcome.scenario.variant == SEMAPHORE:  # both places in use again
            result.recoveries.append(full_again(accepted, after, SEMAPHORE_LIMIT))
        else:
            result.recoveries.append(min(starts) - after if starts else None)
        result.pauses.append(pause(accepted, fault))
    result.hangs = len(outcome.hung_at_stop) + _gaps(outcome, sections, events)
    result.two_holders = two_holders(sections)
    _partition(result, sections)
    result.missing = sorted(outcome.scenario.shows - _shown(result))
    result.violations = _violations(result)
    if demand_shows:
        result.violations += [f"did not show {what}" for what in result.missing]
    return result


def _partition(result: Result, sections: list[Section]) -> None:
    """The figures of a partition: deposed grants, the Sentinel side's wait, the demotion."""
    outcome = result.outcome
    cuts = [f for f in outcome.faults if f.kind.startswith("partition-")]
    if not cuts or not outcome.old_side:
        return
    cut = cuts[0]
    demoted = outcome.marks.get("demoted")
    # A token is the granting server's clock in microseconds (or one above the last token):
    # the old primary's side's holds with a token from after the cut were granted after it.
    # Only the old primary serves that side, and it passed nothing on to the sentinels' side
    # from the cut on: its demotion discarded them all.
    cut_us = cut.wall * 1_000_000
    result.deposed_grants = sum(
        1 for s in sections if s.worker in outcome.old_side and s.token >= cut_us
    )
    followers = [s for s in sections if s.worker not in outcome.old_side]
    result.sentinel_out = pause(followers, cut)
    promoted, healed = outcome.marks.get("promoted"), outcome.marks.get("healed", cut.end)
    # The sentinels' side had a primary, and no lock: no section of theirs started from the
    # promotion until the heal.
    result.locked_out = promoted is not None and not any(
        promoted <= s.start <= healed for s in followers
    )
    result.demoted_after = demoted - cut.end if demoted is not None else None


def _shown(result: Result) -> set[str]:
    """What the result shows happening, of what a scenario may be there to show."""
    shown = {
        "overlaps": result.overlaps > 0,
        "lost-updates": result.lost_updates > 0,
        "deposed-grants": result.deposed_grants > 0,
        "lockout": result.locked_out,
    }
    return {what for what, seen in shown.items() if seen}


def pause(accepted: list[Section], fault: Fault) -> float | None:
    """The longest stretch in which no accepted section was in progress, among those that
    meet [fault.start, fault.end]; None when no section started after the fault began."""
    ordered = sorted(accepted, key=lambda s: s.start)
    if not ordered or ordered[-1].start < fault.start:
        return None
    longest = 0.0
    busy_until = ordered[0].end  # the latest end of the sections started so far
    for section in ordered[1:]:
        if busy_until < section.start and busy_until <= fault.end and section.start >= fault.start:
            longest = max(longest, section.start - busy_until)
        busy_until = max(busy_until, section.end)
    return longest


def _gaps(outcome: Outcome, sections: list[Section], events: list[Event]) -> int:
    """Stretches longer than a pass may take in which a worker recorded nothing."""
    scenario = outcome.scenario
    bound = BLOCKING_TIMEOUT + WORK + 2 * (scenario.socket_timeout or 0.0) + HANG_SLACK
    moments: dict[int, list[float]] = {}
    for section in sections:
        moments.setdefault(section.pid, []).append(section.end)
    for event in events:
        moments.setdefault(event.pid, []).append(event.at)
    gaps = 0
    for times in moments.values():
        times.sort()
        for before, after in itertools.pairwise(times):
            faulted = sum(
                max(0.0, min(after, f.end) - max(before, f.start)) for f in outcome.faults
            )
            gaps += after - before > bound + faulted
    return gaps


def _violations(result: Result) -> list[str]:
    scenario = result.outcome.scenario
    found = []
    if result.sections == 0:
        found.append("no section succeeded")
    if result.overlaps and "overlaps" not in scenario.allows:
        found.append(f"{result.overlaps} overlapping sections")
    if result.stale_accepted:
        found.append(f"{result.stale_accepted} stale writes accepted")
    if result.tokens_back and "overlaps" not in scenario.allows:
        found.append(f"{result.tokens_back} sections with a token not above the one before")
    if result.lost_updates and "lost-updates" not in scenario.allows:
        found.append(f"{result.lost_updates} lost updates")
    if result.hangs:
        found.append(f"{result.hangs} hangs")
    if result.errors:
        found.append(f"{len(result.errors)} unexpected errors ({result.errors[0]})")
    for seconds in result.pauses:
        if seconds is not None and scenario.max_pause is not None and seconds > scenario.max_pause:
            found.append(f"pause {seconds:.2f} s > {scenario.max_pause:g} s")
    for seconds in result.recoveries:
        if seconds is None:
            found.append("no section after a fault")
        elif scenario.max_recovery is not None and seconds > scenario.max_recovery:
            found.append(f"recovery {seconds:.2f} s > {scenario.max_recovery:g} s")
    return found


COLUMNS = (
    "scenario",
    "sections",
    "refused",
    "overlaps",
    "late acc.",
    "stale acc.",
    "lost upd.",
    "unavail.",
    "rel. failed",
    "recovery s",
    "pause s",
    "hangs",
    "verdict",
)


def row(result: Result) -> list[str]:
    """The table row of a result."""
    recoveries = [r for r in result.recoveries if r is not None]
    missing = len(result.recoveries) - len(recoveries)
    recovery = f"{max(recoveries):.2f}" if recoveries else "-"
    if missing:
        recovery += f" ({missing} none)"
    pauses = [p for p in result.pauses if p is not None]
    return [
        result.outcome.scenario.name,
        str(result.sections),
        str(result.refused),
        str(result.overlaps),
        str(result.late_accepted),
        str(result.stale_accepted),
        str(result.lost_updates),
        str(result.unavailable),
        str(result.release_failed),
        recovery,
        f"{max(pauses):.2f}" if pauses else "-",
        str(result.hangs),
        "ok" if result.passed else "FAIL",
    ]


PARTITION_COLUMNS = (
    "scenario",
    "cut",
    "promoted s",
    "overlaps",
    "two holders s",
    "refused",
    "tokens back",
    "lost upd.",
    "deposed grants",
    "Sentinel side out s",
    "demoted s",
    "shows",
    "verdict",
)


def partition_row(result: Result) -> list[str]:
    """The partition table's row of a result."""
    outcome = result.outcome
    cut = next(f for f in outcome.faults if f.kind.startswith("partition-"))
    promoted = outcome.marks.get("promoted")
    shows = sorted(outcome.scenario.shows)
    return [
        outcome.scenario.name,
        f"{cut.kind.removeprefix('partition-')} {cut.end - cut.start:.1f} s",
        f"{promoted - cut.start:.1f}" if promoted is not None else "-",
        str(result.overlaps),
        f"{result.two_holders:.1f}",
        str(result.refused),
        str(result.tokens_back),
        str(result.lost_updates),
        str(result.deposed_grants),
        f"{result.sentinel_out:.1f}" if result.sentinel_out is not None else "none",
        f"{result.demoted_after:.1f}" if result.demoted_after is not None else "not",
        ", ".join(f"{w} NOT SEEN" if w in result.missing else w for w in shows) or "-",
        "ok" if result.passed else "FAIL",
    ]


def partitioned(results: list[Result]) -> list[Result]:
    """The results of partition scenarios."""
    return [r for r in results if any(f.kind.startswith("partition-") for f in r.outcome.faults)]


def table(results: list[Result]) -> str:
    """Plain-text tables of the results, one row per scenario: every scenario, then the
    partition figures of the partition scenarios (if any)."""
    text = text_table(list(COLUMNS), [row(r) for r in results])
    cuts = partitioned(results)
    if cuts:
        text += "\n\n" + text_table(list(PARTITION_COLUMNS), [partition_row(r) for r in cuts])
    return text


def text_table(header: list[str], cells: list[list[str]]) -> str:
    """A plain-text table: the header, a rule, a row per item of ``cells``."""
    rows = [header, *cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)) for r in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)
