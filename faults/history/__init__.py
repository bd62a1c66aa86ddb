"""A linearizability checker for the fault suite's histories (issue 41).

    from faults.history import check_file, check_events, Verdict, Malformed, MODELS
    check_file("run.history.jsonl", "mutex")        # -> Verdict; raises Malformed
    python3 dev.py check-history FILE --model MODEL   # exit 0, 1 (not linearizable), 2 (malformed)

A history is JSON Lines, one event a line (faults/recorder.py writes them); each key is checked
on its own (linearizability is compositional), by a search for a legal order of its operations
(faults/history/search.py) against a sequential model (faults/history/models.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.history.events import Malformed, Op, operations, read
from faults.history.models import (
    DROPPED,
    FencedRegister,
    Leader,
    Model,
    ModelError,
    Mutex,
    RWLock,
    Semaphore,
)
from faults.history.search import Failure, TooLong, check_key

__all__ = [
    "MODELS",
    "Failure",
    "Malformed",
    "Op",
    "TooLong",
    "Verdict",
    "check_events",
    "check_file",
    "model",
]

#: The models by name; ``semaphore`` takes its number of holders: ``semaphore:3``.
MODELS: dict[str, Callable[..., Model]] = {
    "mutex": Mutex,
    "fenced-register": FencedRegister,
    "semaphore": Semaphore,
    "rwlock": RWLock,
    "leader": Leader,
}


def model(name: str) -> Model:
    """The model a name names (``semaphore:N`` with N a positive integer); ValueError if none."""
    base, colon, limit = name.partition(":")
    if base == "semaphore":
        if not colon or not limit.isdigit() or int(limit) < 1:
            raise ValueError(f"semaphore takes its number of holders: semaphore:N (got {name!r})")
        return Semaphore(int(limit))
    if base not in MODELS or colon:
        raise ValueError(
            f"no model {name!r}: one of mutex, fenced-register, semaphore:N, rwlock, leader"
        )
    return MODELS[base]()


@dataclass
class Verdict:
    """What the check found: ``operations`` (every operation of the history, fail and info
    included) over ``keys``, and one Failure per key that no order explains."""

    model: str
    operations: int
    keys: int
    failures: list[Failure] = field(default_factory=list)

    @property
    def linearizable(self) -> bool:
        return not self.failures

    def last_line(self) -> str:
        """``linearizable: N operations`` or ``not linearizable: ...``, as the CLI ends."""
        if self.linearizable:
            return f"linearizable: {self.operations} operations"
        first = self.failures[0]
        return (
            f"not linearizable: {len(self.failures)} of {self.keys} keys under {self.model}, "
            f"first {first.key!r}: {first.why}"
        )

    def lines(self) -> list[str]:
        """Every line the CLI prints: each failure's window, then the last line."""
        out = [line for each in self.failures for line in each.lines()]
        return [*out, self.last_line()]


def check_file(path: Path | str, model_name: str, *, steps: int | None = None) -> Verdict:
    """Check the history file at ``path`` against the model named; raises Malformed (a
    ValueError, with the line) for a history it cannot read, ValueError for an unknown model;
    ``steps``: how many steps the search of a key may take (TooLong past them)."""
    return check(read(path), model_name, steps)


def check_events(
    events: Iterable[dict[str, Any]], model_name: str, *, steps: int | None = None
) -> Verdict:
    """The same for events as dicts (numbered from 1 in Malformed's messages)."""
    return check(enumerate(events, 1), model_name, steps)


def check(
    numbered: Iterable[tuple[int, dict[str, Any]]], model_name: str, steps: int | None = None
) -> Verdict:
    """Check numbered events against the model named, key by key."""
    spec = model(model_name)
    keys = operations(numbered, spec.fs)
    verdict = Verdict(spec.name, sum(map(len, keys.values())), len(keys))
    for key, ops in sorted(keys.items()):
        kept, roles = [], []
        for op in ops:
            try:
                role = spec.role(op)
            except ModelError as exc:
                raise Malformed(op.line, str(exc)) from None
            if role != DROPPED:
                kept.append(op)
                roles.append(role)
        found = check_key(key, kept, roles, spec, steps)
        if found is not None:
            verdict.failures.append(found)
    return verdict
