"""The search for a legal order of one key's operations: Wing & Gong's, with Lowe's cache.

The calls and returns, ordered by time (a call before a return at the same time: they count as
concurrent), form a doubly linked list (arrays of next and previous). The search walks it: a
call whose operation can take effect now is linearized (lifted out of the list with its return)
and the walk starts again from the front; reaching a return means that operation can no longer
be linearized before it returned: undo the last choice and try the next call after it.
``info`` operations return at infinity, so they never force a step back, and the search is done
when every required operation is linearized. Iterative: histories are longer than Python's
recursion limit.

The cache: a (set of linearized required operations, state) seen once needs no second visit;
and since an optional operation may always be left out, one reached with a superset of the
optional operations already linearized is dominated by the first (it can do no more).

Where every order gets stuck, the failure reported is the furthest one: the return it reached
last in time, the state there, the operation whose return it is and those still open then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faults.history.events import Op
from faults.history.models import OPTIONAL, Model


@dataclass
class Failure:
    """One key no order explains: the operation stuck, why, and the window: the operations open
    when it got stuck (``before``: the last one linearized, for the state it left)."""

    key: str
    why: str
    stuck: Op
    window: list[Op] = field(default_factory=list)
    before: Op | None = None

    def lines(self) -> list[str]:
        """The failure as the CLI prints it."""
        out = [f"key {self.key!r}: {self.why}"]
        if self.before is not None:
            out.append(f"  after     {self.before.describe()}")
        for op in self.window:
            mark = "stuck" if op is self.stuck else "open"
            out.append(f"  {mark:<9} {op.describe()}")
        return out


class TooLong(RuntimeError):
    """The search of a key took more steps than it was allowed (``check_key``'s ``steps``)."""


class Stuck:
    """The furthest point any order reached, kept as the search goes."""

    def __init__(self) -> None:
        self.position = -1
        self.op_index = -1
        self.state: Any = None
        self.linearized: tuple[int, int] = (0, 0)
        self.last = -1


def check_key(
    key: str, ops: list[Op], roles: list[str], model: Model, steps: int | None = None
) -> Failure | None:
    """None if some order of ``ops`` (their ``roles`` given) is legal, else the Failure;
    TooLong past ``steps`` steps (a call tried or passed, a step back), if given."""
    optional = [role == OPTIONAL for role in roles]
    entries = sorted(
        [(op.invoke, 0, i) for i, op in enumerate(ops)]
        + [(op.complete if not optional[i] else float("inf"), 1, i) for i, op in enumerate(ops)]
    )
    size = len(entries)
    # Positions 1..size, 0 the head, size + 1 the tail.
    is_call = [False] + [kind == 0 for _, kind, _ in entries] + [False]
    index = [-1] + [i for _, _, i in entries] + [-1]
    match = [0] * (size + 2)
    calls: dict[int, int] = {}
    for position in range(1, size + 1):
        if is_call[position]:
            calls[index[position]] = position
        else:
            match[calls[index[position]]] = position
    nxt = [*range(1, size + 2), size + 1]
    prv = [0, *range(size + 1)]
    step, stuck = model.step, Stuck()
    left = sum(1 for flag in optional if not flag)
    state, required, info = model.initial, 0, 0
    cache: dict[tuple[int, Any], list[int]] = {}
    trail: list[tuple[int, bool, Any, int, int]] = []
    entry, phase = nxt[0], False  # phase: trying the required calls (False), the optional
    budget = -1 if steps is None else steps
    while left:
        budget -= 1
        if budget == -1:
            raise TooLong(f"key {key!r}: no verdict after {steps} steps")
        if is_call[entry]:
            i = index[entry]
            new = step(state, ops[i]) if optional[i] is phase else None
            if new is not None:
                bit = 1 << i
                got_required, got_info = (required, info | bit) if phase else (required | bit, info)
                seen = cache.setdefault((got_required, new), [])
                if not any(mask | got_info == got_info for mask in seen):
                    seen.append(got_info)
                    trail.append((entry, phase, state, required, info))
                    state, required, info = new, got_required, got_info
                    left -= not phase
                    ret = match[entry]
                    nxt[prv[entry]], prv[nxt[entry]] = nxt[entry], prv[entry]
                    nxt[prv[ret]], prv[nxt[ret]] = nxt[ret], prv[ret]
                    entry, phase = nxt[0], False
                    continue
            entry = nxt[entry]
            continue
        if not phase:  # no required call fits here: the optional ones, before a step back
            entry, phase = nxt[0], True
            continue
        if entry > stuck.position:
            stuck.position, stuck.op_index, stuck.state = entry, index[entry], state
            stuck.linearized = (required, info)
            stuck.last = index[trail[-1][0]] if trail else -1
        if not trail:
            return failure(key, ops, optional, model, stuck)
        entry, phase, state, required, info = trail.pop()
        left += not phase
        ret = match[entry]
        nxt[prv[ret]] = prv[nxt[ret]] = ret
        nxt[prv[entry]] = prv[nxt[entry]] = entry
        entry = nxt[entry]
    return None


def failure(key: str, ops: list[Op], optional: list[bool], model: Model, stuck: Stuck) -> Failure:
    """The Failure at the furthest point reached."""
    op = ops[stuck.op_index]
    required, info = stuck.linearized
    open_required = [
        each
        for i, each in enumerate(ops)
        if not optional[i] and not required >> i & 1 and each.invoke <= (op.complete or 0)
    ]
    since = min(each.invoke for each in open_required)
    window = [
        each
        for i, each in enumerate(ops)
        if each in open_required
        or (optional[i] and not info >> i & 1 and since <= each.invoke <= (op.complete or 0))
    ]
    if model.step(stuck.state, op) is None:
        why = model.why(stuck.state, op)
    else:
        why = f"no order of the operations open with {op.f} by {op.process} lets it take effect"
    before = ops[stuck.last] if stuck.last >= 0 else None
    return Failure(key, why, op, window, before)
