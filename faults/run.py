"""The fault-injection suite: `python3 dev.py faults [--short] [--write] [SCENARIO...]`.

Each scenario starts its own Redis deployment on loopback ports and a SQLite store in a
temporary directory, runs worker processes that take one lock and write the store under it
(faults/worker.py), injects its fault (faults/scenarios.py), and checks what the store
recorded against what the documentation promises (faults/check.py). Prints a table; with --write,
writes docs/faults.rst. Exits 1 when any scenario saw what the documentation does not allow.

    --short   the scenarios marked short, one fault each, a 3 s Redis freeze and 6 s
              partitions (CI: about two minutes and a quarter); scenarios named on the command
              line run all the same; a scenario that did not show what it is there to show
              is reported, not failed
    default   every scenario, three faults each (a partition: one), a 7 s Redis freeze and
              9 s partitions; a scenario that did not show what it is there to show fails
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from faults import leader_check  # noqa: E402
from faults.check import Result, check, table, text_table  # noqa: E402
from faults.histories import HistoryCheck, check_scenario, models_of  # noqa: E402
from faults.leader import LEADER_SCENARIOS, LeaderRun, LeaderScenario  # noqa: E402
from faults.scenarios import LONG_CUT, SCENARIOS, SHORT_CUT, Run, Scenario, scratch  # noqa: E402
from faults.unique import COLUMNS as UNIQUE_COLUMNS  # noqa: E402
from faults.unique import (  # noqa: E402
    UNIQUE_SCENARIOS,
    UniqueResult,
    UniqueRun,
    UniqueScenario,
)
from faults.unique import check as unique_check  # noqa: E402
from faults.unique import row as unique_row  # noqa: E402
from faults.worker import HISTORY  # noqa: E402

# What each topology needs beyond the standard library and Django.
CLUSTER_NEEDS = ("testproject.cluster", "django_valkey")
SENTINEL_NEEDS = ("testproject.topology",)
NEEDS = {
    "sentinel": SENTINEL_NEEDS,
    "partition-r2-left0": SENTINEL_NEEDS,
    "partition-r3-left1": SENTINEL_NEEDS,
    "partition-r2-left1": SENTINEL_NEEDS,
    "cluster": CLUSTER_NEEDS,
    "cluster-partial-coverage": CLUSTER_NEEDS,
}


def missing(topology: str) -> str | None:
    """Why the scenarios of ``topology`` cannot run here, or None when they can."""
    for module in NEEDS.get(topology, ()):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} is not available ({exc})"
    return None


def history(
    scenario: Scenario | LeaderScenario | UniqueScenario, directory: Path
) -> HistoryCheck | None:
    """The check of the histories a lock scenario's processes left in ``directory / HISTORY``
    (its models follow from its variant), or None for a scenario that records none here: a
    leadership scenario checks its children's history itself (faults/leader_check.py)."""
    if not isinstance(scenario, Scenario):
        return None
    models = models_of(scenario.variant)
    if not models:
        return None
    return check_scenario(
        directory / HISTORY, scenario.name, models, scenario.lease, scenario.history
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="dev.py faults", description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="one fault per scenario (CI)")
    parser.add_argument("--write", action="store_true", help="write docs/faults.rst")
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    options = parser.parse_args()
    everything: list[Scenario | LeaderScenario | UniqueScenario] = [
        *SCENARIOS,
        *LEADER_SCENARIOS,
        *UNIQUE_SCENARIOS,
    ]
    known = {scenario.name: scenario for scenario in everything}
    unknown = [name for name in options.scenarios if name not in known]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[name] for name in options.scenarios]
    chosen = chosen or [s for s in known.values() if s.short or not options.short]
    skipped = {name: why for name in NEEDS if (why := missing(name))}
    for name, why in skipped.items():
        if any(s.topology == name for s in chosen):
            print(f"faults: skipping the {name} scenarios: {why}", file=sys.stderr)
    chosen = [s for s in chosen if s.topology not in skipped]

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "faults.settings")
    import django

    django.setup()
    repeats, freeze, cut = (1, 3.0, SHORT_CUT) if options.short else (3, 7.0, LONG_CUT)
    started = time.monotonic()
    results: list[Result] = []
    leaders: list[leader_check.LeaderResult] = []  # the leadership scenarios' own figures
    uniques: list[UniqueResult] = []  # the unique-task scenarios' own figures
    histories: dict[str, HistoryCheck] = {}  # by scenario: the histories' verdicts
    for scenario in chosen:
        print(f"faults: {scenario.name} ...", file=sys.stderr, flush=True)
        with scratch() as directory:
            if isinstance(scenario, LeaderScenario):
                led = LeaderRun(scenario, directory, repeats, cut).play()
                leaders.append(leader_check.check(led, demand_bounds=not options.short))
                seconds, violations = led.seconds, leaders[-1].violations
            elif isinstance(scenario, UniqueScenario):
                played = UniqueRun(scenario, directory, repeats).play()
                uniques.append(unique_check(played, demand_shows=not options.short))
                seconds, violations = played.seconds, uniques[-1].violations
            else:
                outcome = Run(scenario, directory, repeats, freeze, cut).play()
                results.append(check(outcome, demand_shows=not options.short))
                seconds, violations = outcome.seconds, results[-1].violations
            checked = history(scenario, directory)
        if checked is not None:
            histories[scenario.name] = checked
            violations = [*violations, *checked.violations]
        verdict = "FAIL: " + "; ".join(violations) if violations else "ok"
        print(f"faults: {scenario.name}: {seconds:.1f} s, {verdict}", file=sys.stderr)
        if isinstance(scenario, Scenario) and results[-1].wake_ups:  # a cluster's
            print(f"faults: {scenario.name}: {', '.join(results[-1].wake_ups)}", file=sys.stderr)
        if checked is not None:
            print(f"faults: {scenario.name}: history: {checked.summary()}", file=sys.stderr)
    if results:
        print(table(results))
    if leaders:
        print(text_table(list(leader_check.COLUMNS), [leader_check.row(r) for r in leaders]))
    if uniques:
        print(text_table(list(UNIQUE_COLUMNS), [unique_row(r) for r in uniques]))
    print(
        f"\n{len(results) + len(leaders) + len(uniques)} scenarios"
        f" in {time.monotonic() - started:.0f} s",
        end="",
    )
    print(f" ({'short' if options.short else 'long'} run)")
    for name, checked in histories.items():
        print(f"{name}: {checked.summary()}")
    for name, why in skipped.items():
        print(f"{name} scenarios not run: {why}")
    if options.write:
        from faults.report import write

        path = write(
            results,
            short=options.short,
            freeze=freeze,
            cut=cut,
            skipped=skipped,
            leaders=leaders,
            uniques=uniques,
            histories=histories,
        )
        print(f"wrote {path.relative_to(ROOT)}")
    failed = [(r.outcome.scenario.name, r.violations) for r in results if not r.passed]
    failed += [(r.outcome.scenario.name, r.violations) for r in leaders if not r.passed]
    failed += [(r.outcome.scenario.name, r.violations) for r in uniques if not r.passed]
    failed += [(name, c.violations) for name, c in histories.items() if c.violations]
    for name, violations in failed:
        print(f"FAIL {name}: {'; '.join(violations)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
