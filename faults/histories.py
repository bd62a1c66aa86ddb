"""The histories of a scenario, checked: each model that applies, its verdict, what it means.

The workers record their operations (faults/recorder.py) in the scenario's directory under
``history``. Once they stopped, :func:`check_scenario` ends the holds of the killed ones by
their lease (:func:`expire_killed`: nobody else can say when a SIGKILLed holder's hold ended),
merges the files by time, and checks one view of the merged history per model
(faults/history/): the lock's ``acquire``/``release`` as a mutex, its tokens and the counter's
writes and reads as a fenced register, a semaphore's places, a read/write lock's holders, a
leadership's epochs. A view that is not linearizable is kept under KEPT, where the output says,
for ``python3 dev.py check-history FILE --model MODEL``.

What a violation means depends on the scenario (its ``history``): LINEARIZABLE (the
documentation promises it: a violation fails the run), MAY_VIOLATE (a setting the documentation
says is unsafe: reported), VIOLATES (an unsafe setting the scenario provokes: the checker must
catch it, and not catching it fails the run).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.recorder import SUFFIX, History, events, merge

LINEARIZABLE = "linearizable"
MAY_VIOLATE = "may violate"
VIOLATES = "violates"
# Where the views that are not linearizable are kept, one directory per scenario.
KEPT = Path(tempfile.gettempdir()) / "django-redis-lock-histories"
# The operations that start a hold, and those that end one (the worker's own end: a release).
HOLDS = frozenset({"acquire", "acquire-read", "acquire-write", "elected"})
ENDS = frozenset({"release", "release-read", "release-write", "resigned"})
# What each model's view keeps of the merged history, and the operations it renames.
VIEWS: dict[str, tuple[frozenset[str], dict[str, str]]] = {
    "mutex": (frozenset({"acquire", "release", "expire"}), {}),
    "semaphore": (frozenset({"acquire", "release", "expire"}), {}),
    "rwlock": (
        frozenset({"acquire-read", "release-read", "acquire-write", "release-write", "expire"}),
        {},
    ),
    "fenced-register": (
        frozenset({"acquire", "acquire-write", "elected", "write", "read"}),
        {"acquire-write": "acquire", "elected": "acquire"},
    ),
    "leader": (frozenset({"elected", "resigned", "act", "expire"}), {}),
}
# The longest a window of a violation is shown, in characters.
WINDOW_CHARS = 240


@dataclass(frozen=True)
class ModelVerdict:
    """What the checker said of one model's view of a scenario's history."""

    model: str
    operations: int
    linearizable: bool
    line: str  # the checker's last line
    window: str = ""  # the failing window, shortened
    anomaly: str = ""  # what the first failing key shows, in a line
    kept: Path | None = None  # the view, kept when not linearizable


@dataclass
class HistoryCheck:
    """A scenario's verdicts, and what its documentation expects of them."""

    expected: str = LINEARIZABLE
    verdicts: list[ModelVerdict] = field(default_factory=list)
    error: str = ""  # the histories could not be checked (malformed, missing)

    @property
    def operations(self) -> int:
        """Operations checked, over every model."""
        return sum(v.operations for v in self.verdicts)

    @property
    def caught(self) -> list[ModelVerdict]:
        """The models whose view is not linearizable."""
        return [v for v in self.verdicts if not v.linearizable]

    @property
    def violations(self) -> list[str]:
        """What fails the run: a violation where none is allowed, none where one must be
        caught, or histories that could not be checked."""
        if self.error:
            return [f"history: {self.error}"]
        if self.caught and self.expected == LINEARIZABLE:
            return [f"history not linearizable ({v.model}: {v.line})" for v in self.caught]
        if not self.caught and self.expected == VIOLATES:
            return ["history: the checker did not catch the violation this setting allows"]
        return []

    def summary(self) -> str:
        """One line per model: "mutex: N operations, linearizable" or the violation."""
        if self.error:
            return f"not checked: {self.error}"
        parts = []
        for verdict in self.verdicts:
            if verdict.linearizable:
                parts.append(f"{verdict.model}: {verdict.operations} operations, linearizable")
            else:
                parts.append(
                    f"{verdict.model}: {verdict.operations} operations, NOT linearizable: "
                    f"{verdict.anomaly} [{verdict.window}]"
                )
                if verdict.kept is not None:
                    parts[-1] += f" (kept: {verdict.kept} --model {verdict.model})"
        expected = f" (expected: {self.expected})" if self.expected != LINEARIZABLE else ""
        return "; ".join(parts) + expected


def models_of(variant: str) -> tuple[str, ...]:
    """The models a lock scenario's variant is checked against (faults/store.py's variants)."""
    from faults.store import RWLOCK, SEMAPHORE, SEMAPHORE_LIMIT

    if variant == SEMAPHORE:
        return (f"semaphore:{SEMAPHORE_LIMIT}",)
    if variant == RWLOCK:
        return ("rwlock", "fenced-register")
    return ("mutex", "fenced-register")


def view(found: Iterable[dict[str, Any]], model: str) -> Iterator[dict[str, Any]]:
    """The events of ``found`` that ``model`` checks, its operations renamed as it names them."""
    kept, renamed = VIEWS[model.split(":")[0]]
    for event in found:
        if event["f"] in kept:
            yield {**event, "f": renamed.get(event["f"], event["f"])}


def holding(found: Iterable[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """The processes whose history ends holding (a hold granted, or asked for and never
    answered, with no end of the worker's own after it): their key and the hold's invoke
    time (ns)."""
    state: dict[str, tuple[str, int] | None] = {}
    asked: dict[str, int] = {}
    for event in sorted(found, key=lambda e: e["time"]):
        process, f = str(event["process"]), event["f"]
        if f in HOLDS and event["type"] == "invoke":
            asked[process] = event["time"]
            state[process] = (event["key"], event["time"])  # unanswered: maybe held
        elif f in HOLDS and event["type"] != "ok":  # refused; or unknown: its lease ends it
            state[process] = None
        elif f in HOLDS:
            state[process] = (event["key"], asked[process])
        elif f in ENDS and event["type"] != "invoke":
            state[process] = None
    return {process: hold for process, hold in state.items() if hold is not None}


def holds_now(directory: Path, pid: int) -> bool:
    """Whether the worker ``pid`` holds, as its history in ``directory`` says so far (read while
    it is stopped): its last acquire or release is an acquire granted."""
    last: dict[str, Any] | None = None
    for event in events(sorted(directory.glob(f"*:{pid}-{pid}{SUFFIX}"))):
        if event["f"] in HOLDS | ENDS:
            last = event
    return last is not None and last["f"] in HOLDS and last["type"] == "ok"


def expire_killed(directory: Path, lease: float) -> int:
    """End by their lease the holds the histories of ``directory`` leave open (a killed
    holder's), in a file of the controller's; how many."""
    open_holds = holding(events(sorted(directory.glob(f"*{SUFFIX}"))))
    if not open_holds:
        return 0
    controller = History(directory, "controller")
    try:
        for process, (key, invoked) in sorted(open_holds.items()):
            earliest = invoked + int(lease * 1e9)
            lease_process, value = f"{process}/lease", [process, invoked]
            controller.event("invoke", "expire", key, value, process=lease_process, at=earliest)
            controller.event("info", "expire", key, value, process=lease_process, at=earliest)
    finally:
        controller.close()
    return len(open_holds)


def check_scenario(
    directory: Path, name: str, models: Iterable[str], lease: float, expected: str
) -> HistoryCheck:
    """Check the histories a scenario's processes left in ``directory`` (its scratch
    directory's ``history``) against each of ``models``."""
    from faults.history import Malformed, check_file

    result = HistoryCheck(expected)
    if not directory.is_dir():
        result.error = f"no histories in {directory}"
        return result
    expire_killed(directory, lease)
    merged = directory.parent / "history.jsonl"
    merge(directory, merged)
    with merged.open(encoding="utf-8") as lines:
        found = [json.loads(line) for line in lines]
    for model in models:
        path = directory.parent / f"history.{model.replace(':', '-')}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in view(found, model))
        try:
            verdict = check_file(path, model)
        except Malformed as exc:
            result.error = f"{model}: malformed history ({exc})"
            return result
        result.verdicts.append(_verdict(verdict, model, path, name))
    return result


def _verdict(verdict: Any, model: str, path: Path, name: str) -> ModelVerdict:
    """A ModelVerdict of the checker's Verdict; the view kept when not linearizable."""
    if verdict.linearizable:
        return ModelVerdict(model, verdict.operations, True, verdict.last_line())
    kept = KEPT / name / path.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, kept)
    window = " | ".join(" ".join(line.split()) for line in verdict.failures[0].lines()[1:])
    if len(window) > WINDOW_CHARS:
        window = window[: WINDOW_CHARS - 3] + "..."
    anomaly = verdict.failures[0].why
    line = verdict.last_line()
    return ModelVerdict(
        model, verdict.operations, False, line, window=window, kept=kept, anomaly=anomaly
    )
