"""The models: small sequential specifications of what the locks promise.

Each is a pure function of (state, operation) to the next state, or None when the operation
cannot take effect in that state; the states are hashable (the search remembers them). Before
the search, :meth:`Model.role` says what each operation is: ``REQUIRED`` (it took effect, inside
its invoke and completion), ``OPTIONAL`` (``info``: it may have taken effect, at any time after
its invoke, or never) or ``DROPPED`` (it certainly changed nothing: a ``fail``, or a read whose
answer is unknown). ``why`` explains an illegal step in a line.

``expire`` (every model but the fenced register) ends a hold whose end is not known: the value
is the holder (in the leader model: the leader).
"""

from __future__ import annotations

import json
from typing import Any

from faults.history.events import Op

REQUIRED, OPTIONAL, DROPPED = "required", "optional", "dropped"


class ModelError(ValueError):
    """An operation's value is not what the model reads (a token that is not an integer)."""


def names(processes: frozenset[Any]) -> str:
    return ", ".join(sorted(map(str, processes))) or "nobody"


class Model:
    """A sequential specification: ``initial`` state, the ``f``s it knows, ``step``, ``why``."""

    name = ""
    fs: frozenset[str] = frozenset()
    initial: Any = None

    def role(self, op: Op) -> str:
        """REQUIRED for ok, OPTIONAL for info, DROPPED for fail (a definite non-event)."""
        return {"ok": REQUIRED, "info": OPTIONAL}.get(op.kind, DROPPED)

    def step(self, state: Any, op: Op) -> Any:
        """The state after ``op``, or None if it cannot take effect in ``state``."""
        raise NotImplementedError

    def why(self, state: Any, op: Op) -> str:
        """Why ``op`` cannot take effect in ``state``, in a line."""
        raise NotImplementedError


class Semaphore(Model):
    """At most ``limit`` holders; the state is the frozenset of holders."""

    fs = frozenset({"acquire", "release", "expire"})
    initial: frozenset[Any] = frozenset()

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"a semaphore takes a positive number of holders (got {limit!r})")
        self.limit = limit
        self.name = f"semaphore:{limit}"

    def step(self, state: frozenset[Any], op: Op) -> frozenset[Any] | None:
        if op.f == "acquire":
            if len(state) >= self.limit or op.process in state:
                return None
            return state | {op.process}
        holder = op.argument if op.f == "expire" else op.process
        return state - {holder} if holder in state else None

    def why(self, state: frozenset[Any], op: Op) -> str:
        if op.f == "acquire":
            return f"acquire by {op.process} while {self.held(state)}"
        holder = op.argument if op.f == "expire" else op.process
        return f"{op.f} of {holder}'s hold while {self.held(state)}"

    def held(self, state: frozenset[Any]) -> str:
        if not state:
            return "nobody holds"
        return f"{names(state)} hold{'s' if len(state) == 1 else ''} ({len(state)} of {self.limit})"


class Mutex(Semaphore):
    """One holder at a time."""

    def __init__(self) -> None:
        super().__init__(1)
        self.name = "mutex"

    def held(self, state: frozenset[Any]) -> str:
        return f"{names(state)} holds" if state else "nobody holds"


class RWLock(Model):
    """Readers share, a writer excludes everyone; the state is (writer or None, readers)."""

    name = "rwlock"
    fs = frozenset({"acquire-read", "release-read", "acquire-write", "release-write", "expire"})
    initial: tuple[Any, frozenset[Any]] = (None, frozenset())

    def step(self, state: tuple[Any, frozenset[Any]], op: Op) -> tuple[Any, frozenset[Any]] | None:
        writer, readers = state
        f, process = op.f, op.process
        if f == "acquire-read":
            if writer is not None or process in readers:
                return None
            return None, readers | {process}
        if f == "acquire-write":
            return (process, readers) if writer is None and not readers else None
        if f == "release-read":
            return (writer, readers - {process}) if process in readers else None
        if f == "release-write":
            return (None, readers) if writer == process and writer is not None else None
        holder = op.argument  # expire: whatever it holds
        if writer is not None and writer == holder:
            return None, readers
        return (writer, readers - {holder}) if holder in readers else None

    def why(self, state: tuple[Any, frozenset[Any]], op: Op) -> str:
        writer, readers = state
        holding = f"writer {writer}" if writer is not None else f"readers {names(readers)}"
        who = op.argument if op.f == "expire" else op.process
        return f"{op.f} by {who} while {holding} hold{'s' if writer is not None else ''}"


class Leader(Model):
    """One leader at a time, epochs strictly increasing; the state is (leader or None, its
    epoch, the last epoch granted). An ``elected`` of unknown outcome has an unknown epoch."""

    name = "leader"
    fs = frozenset({"elected", "resigned", "act", "expire"})
    initial = (None, None, None)

    def role(self, op: Op) -> str:
        if op.f == "act" and op.kind != "ok":
            return DROPPED  # an act refused or unknown changes nothing
        if op.f == "elected" and op.kind == "ok" and not is_int(op.result):
            raise ModelError(f"elected ok without an integer epoch ({show(op.result)})")
        if op.f == "act" and not is_int(op.argument):
            raise ModelError(f"act without an integer epoch ({show(op.argument)})")
        return super().role(op)

    def step(self, state: tuple[Any, Any, Any], op: Op) -> tuple[Any, Any, Any] | None:
        leader, epoch, last = state
        if op.f == "elected":
            new = op.result if op.kind == "ok" else None
            if leader is not None or (new is not None and last is not None and new <= last):
                return None
            return op.process, new, (last if new is None else new)
        if op.f == "act":
            ok = leader == op.process and epoch is not None and epoch == op.argument
            return state if ok else None
        holder = op.argument if op.f == "expire" else op.process
        return (None, None, last) if leader is not None and leader == holder else None

    def why(self, state: tuple[Any, Any, Any], op: Op) -> str:
        leader, epoch, last = state
        leads = f"{leader} leads (epoch {epoch})" if leader is not None else "nobody leads"
        if op.f == "elected" and leader is None:
            return f"elected {op.process} with epoch {op.result} after epoch {last}"
        if op.f == "act":
            return f"act by {op.process} with epoch {op.argument} while {leads}"
        who = op.argument if op.f == "expire" else op.process
        return f"{op.f} of {who} while {leads}"


class FencedRegister(Model):
    """A store behind fencing tokens; the state is (the last token granted, the last accepted
    write as (token, data), or None). An ``acquire`` of unknown outcome is dropped: a grant
    nobody saw only asks later grants to be higher than a token nobody knows."""

    name = "fenced-register"
    fs = frozenset({"acquire", "write", "read"})
    initial = (None, None)

    def role(self, op: Op) -> str:
        if op.f == "write":
            token = op.argument[0] if isinstance(op.argument, tuple) and op.argument else None
            if len(op.argument or ()) != 2 or not is_int(token):
                raise ModelError(f"write of {show(op.argument)}, not [token, data]")
            return REQUIRED if op.kind == "fail" else super().role(op)  # a refusal is an event
        if op.kind != "ok":
            return DROPPED
        if op.f == "acquire" and not is_int(op.result):
            raise ModelError(f"acquire ok without an integer token ({show(op.result)})")
        return REQUIRED

    def step(self, state: tuple[Any, Any], op: Op) -> tuple[Any, Any] | None:
        granted, last = state
        if op.f == "acquire":
            return None if granted is not None and op.result <= granted else (op.result, last)
        if op.f == "read":
            return state if op.result == last else None
        stale = last is not None and op.argument[0] < last[0]
        if op.kind == "fail":
            return state if stale else None
        return None if stale else (granted, op.argument)

    def why(self, state: tuple[Any, Any], op: Op) -> str:
        granted, last = state
        if op.f == "acquire":
            return f"token {op.result} granted after token {granted}"
        if op.f == "read":
            return f"read {show(op.result)} while the last accepted write is {show(last)}"
        if op.kind == "fail":
            return f"write {show(op.argument)} refused while the last accepted is {show(last)}"
        return f"write {show(op.argument)} accepted after {show(last)}"


def show(value: Any) -> str:
    """A frozen value as JSON shows it (tuples as lists)."""
    return json.dumps(value, default=str)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
