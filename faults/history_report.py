"""docs/faults.rst's histories: per topology and setting, the operations checked, the faults
injected and the violations found (faults/histories.py), as Jepsen publishes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faults.histories import LINEARIZABLE, MAY_VIOLATE, VIOLATES, HistoryCheck
from faults.store import Fault

INTRO = """\
Every worker records each operation it asks for and what it was told, as Jepsen does
(faults/recorder.py: ``invoke``, then ``ok``, ``fail`` or ``info`` when the outcome is unknown,
such as an acquire or a release cut by a fault). After the run the controller ends the holds of
killed holders by their lease, merges the histories by time and checks them for
linearizability (faults/history/, ``python3 dev.py check-history``): the lock as a *mutex*, its
tokens with the counter's writes (accepted or refused by the fence) and reads as a *fenced
register*, the semaphore's places as a *semaphore:2*, the read/write lock's holders as an
*rwlock*. A hold whose end is not known (its holder was killed, or its release found it gone)
ends by its lease, never before its acquire's invoke plus the lease: a second holder granted
while the first one's lease cannot yet have run out is a violation. A violation where the
documentation promises safety fails the run. The settings it calls unsafe are expected to show
one: *possible* (a failover or a cut without ``WAIT_REPLICAS`` may lose a grant) or *caught*
(the scenario provokes it: no ``WAIT_REPLICAS`` under a partition, a restart without
persistence; the run fails if the checker does not catch it). A history that is not
linearizable is kept where the output of ``python3 dev.py faults`` says, for ``python3 dev.py
check-history FILE --model MODEL``.
"""

HEADER = [
    "topology",
    "scenario (setting)",
    "faults injected",
    "operations checked",
    "violations found",
    "expected",
    "verdict",
]
EXPECTED = {
    LINEARIZABLE: "none (promised)",
    MAY_VIOLATE: "possible (unsafe setting)",
    VIOLATES: "caught (unsafe setting)",
}


def setting(scenario: Any) -> str:
    """What a scenario sets: its variant, WAIT_REPLICAS, socket timeout, lease."""
    parts = [str(getattr(scenario, "variant", "leader"))]
    if hasattr(scenario, "wait_replicas"):
        parts.append(f"WAIT_REPLICAS {scenario.wait_replicas}")
    if hasattr(scenario, "socket_timeout"):
        parts.append(f"socket timeout {scenario.socket_timeout or 'none'}")
    parts.append(f"lease {getattr(scenario, 'lease', 0.0):g} s")
    return f"{scenario.name} ({', '.join(parts)})"


def found(checked: HistoryCheck) -> str:
    """The violations found: 0, or each model's anomaly."""
    if checked.error:
        return f"not checked: {checked.error}"
    caught = [f"{v.model}: {v.anomaly}" for v in checked.caught]
    return "; ".join(caught) if caught else "0"


def history_row(scenario: Any, faults: Sequence[Fault], checked: HistoryCheck) -> list[str]:
    """The table row of a scenario's histories."""
    kinds = ", ".join(sorted({fault.kind for fault in faults})) or "none"
    operations = ", ".join(f"{v.model} {v.operations}" for v in checked.verdicts) or "-"
    return [
        str(scenario.topology),
        setting(scenario),
        f"{len(faults)} ({kinds})",
        operations,
        found(checked),
        EXPECTED.get(checked.expected, checked.expected),
        "FAIL" if checked.violations else "ok",
    ]


def history_section(
    played: Sequence[tuple[Any, Sequence[Fault]]],
    histories: dict[str, HistoryCheck],
    short: bool,
    title: str = "Histories",
) -> str:
    """The section: what is checked, then a row per scenario played that left histories."""
    rows = [
        history_row(scenario, faults, histories[scenario.name])
        for scenario, faults in played
        if scenario.name in histories
    ]
    if not rows:
        return ""
    run = "this short run" if short else "this long run"
    lines = [title, "-" * len(title), "", INTRO, f"The histories of {run}:", ""]
    lines += [".. list-table::", "   :header-rows: 1", ""]
    for cells in [HEADER, *rows]:
        lines.append(f"   * - {cells[0]}")
        lines.extend(f"     - {cell}" for cell in cells[1:])
    return "\n".join([*lines, ""])
