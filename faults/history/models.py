"""The models: small sequential specifications of what the locks promise.

Each is a pure function of (state, operation) to the next state, or None when the operation
cannot take effect in that state; the states are hashable (the search remembers them). Before
the search, :meth:`Model.role` says what each operation is: ``REQUIRED`` (it took effect, inside
its invoke and completion), ``OPTIONAL`` (``info``: it may have taken effect, at any time after
its invoke, or never) or ``DROPPED`` (it certainly changed nothing: a ``fail``, or a read whose
answer is unknown). ``why`` explains an illegal step in a line.

``expire`` (every model but the fenced register) ends a hold whose end is not known: its value
is ``[holder, the invoke time of the acquire that granted the hold]`` and it ends that hold only
(in the leader model: the leadership of that ``elected``); in the older form, the value just the
holder, it ends any hold of the holder granted by an acquire invoked before the expire's invoke
(a lease cannot run out before its acquire started). So the states hold each grant as (process,
its acquire's invoke time): a pending expire left by a lost acquire cannot end a later hold.
"""

from __future__ import annotations

import json
from typing import Any

from faults.history.events import Op

REQUIRED, OPTIONAL, DROPPED = "required", "optional", "dropped"


class ModelError(ValueError):
    """An operation's value is not what the model reads (a token that is not an integer)."""


#: A hold: the holder and the invoke time of the acquire that granted it.
Grant = tuple[Any, int]


def names(grants: frozenset[Grant]) -> str:
    return ", ".join(sorted(str(process) for process, _ in grants)) or "nobody"


def lease(op: Op) -> tuple[Any, int | None]:
    """An expire's holder and the invoke time of the acquire whose hold it ends (None in the
    older form, the value just the holder); ModelError for a value that is neither."""
    value = op.argument
    if not isinstance(value, tuple):
        return value, None
    if len(value) != 2 or isinstance(value[0], tuple) or not is_int(value[1]):
        raise ModelError(f"expire of {show(value)}, not [holder, acquire invoke time]")
    return value[0], value[1]


def grant_of(grants: frozenset[Grant], process: Any) -> Grant | None:
    return next((grant for grant in grants if grant[0] == process), None)


def ended(grants: frozenset[Grant], op: Op) -> Grant | None:
    """The grant of ``grants`` that ``op`` ends, if it can: a release its own process's; an
    expire the one of its acquire, or (older form) its holder's granted before it was invoked."""
    if op.f != "expire":
        return grant_of(grants, op.process)
    holder, acquired = lease(op)
    grant = grant_of(grants, holder)
    if grant is None:
        return None
    if acquired is None:  # the older form: a lease cannot run out before its acquire started
        return grant if grant[1] < op.invoke else None
    return grant if grant[1] == acquired else None


def whose(op: Op) -> str:
    """Whose hold ``op`` (a release or an expire) ends, for an explanation."""
    if op.f != "expire":
        return str(op.process)
    holder, acquired = lease(op)
    return f"{holder}" if acquired is None else f"{holder} (acquire invoked at {acquired})"


class Model:
    """A sequential specification: ``initial`` state, the ``f``s it knows, ``step``, ``why``."""

    name = ""
    fs: frozenset[str] = frozenset()
    initial: Any = None

    def role(self, op: Op) -> str:
        """REQUIRED for ok, OPTIONAL for info, DROPPED for fail (a definite non-event)."""
        if op.f == "expire":
            lease(op)  # its value read now: ModelError, not a failure in the search
        return {"ok": REQUIRED, "info": OPTIONAL}.get(op.kind, DROPPED)

    def step(self, state: Any, op: Op) -> Any:
        """The state after ``op``, or None if it cannot take effect in ``state``."""
        raise NotImplementedError

    def why(self, state: Any, op: Op) -> str:
        """Why ``op`` cannot take effect in ``state``, in a line."""
        raise NotImplementedError


class Semaphore(Model):
    """At most ``limit`` holders; the state is the frozenset of their grants."""

    fs = frozenset({"acquire", "release", "expire"})
    initial: frozenset[Grant] = frozenset()

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"a semaphore takes a positive number of holders (got {limit!r})")
        self.limit = limit
        self.name = f"semaphore:{limit}"

    def step(self, state: frozenset[Grant], op: Op) -> frozenset[Grant] | None:
        if op.f == "acquire":
            if len(state) >= self.limit or grant_of(state, op.process) is not None:
                return None
            return state | {(op.process, op.invoke)}
        grant = ended(state, op)
        return None if grant is None else state - {grant}

    def why(self, state: frozenset[Grant], op: Op) -> str:
        if op.f == "acquire":
            return f"acquire by {op.process} while {self.held(state)}"
        return f"{op.f} of {whose(op)}'s hold while {self.held(state)}"

    def held(self, state: frozenset[Grant]) -> str:
        if not state:
            return "nobody holds"
        return f"{names(state)} hold{'s' if len(state) == 1 else ''} ({len(state)} of {self.limit})"


class Mutex(Semaphore):
    """One holder at a time."""

    def __init__(self) -> None:
        super().__init__(1)
        self.name = "mutex"

    def held(self, state: frozenset[Grant]) -> str:
        return f"{names(state)} holds" if state else "nobody holds"


class RWLock(Model):
    """Readers share, a writer excludes everyone; the state is (the writer's grant, or None;
    the readers' grants)."""

    name = "rwlock"
    fs = frozenset({"acquire-read", "release-read", "acquire-write", "release-write", "expire"})
    initial: tuple[Grant | None, frozenset[Grant]] = (None, frozenset())

    def step(
        self, state: tuple[Grant | None, frozenset[Grant]], op: Op
    ) -> tuple[Grant | None, frozenset[Grant]] | None:
        writer, readers = state
        f, grant = op.f, (op.process, op.invoke)
        if f == "acquire-read":
            if writer is not None or grant_of(readers, op.process) is not None:
                return None
            return None, readers | {grant}
        if f == "acquire-write":
            return (grant, readers) if writer is None and not readers else None
        # an expire ends whatever it holds
        if f != "release-read" and ended(frozenset({writer} if writer else ()), op):
            return None, readers
        ends = ended(readers, op) if f != "release-write" else None
        return None if ends is None else (writer, readers - {ends})

    def why(self, state: tuple[Grant | None, frozenset[Grant]], op: Op) -> str:
        writer, readers = state
        holding = f"writer {writer[0]}" if writer is not None else f"readers {names(readers)}"
        who = whose(op) if op.f == "expire" else op.process
        return f"{op.f} by {who} while {holding} hold{'s' if writer is not None else ''}"


class Leader(Model):
    """One leader at a time, epochs strictly increasing; the state is (the leader's grant or
    None, its epoch, the last epoch granted). An ``elected`` of unknown outcome has an unknown
    epoch."""

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
            return (op.process, op.invoke), new, (last if new is None else new)
        if op.f == "act":
            ok = leader is not None and leader[0] == op.process and epoch == op.argument
            return state if ok and epoch is not None else None
        ends = leader is not None and ended(frozenset({leader}), op)
        return (None, None, last) if ends else None

    def why(self, state: tuple[Any, Any, Any], op: Op) -> str:
        leader, epoch, last = state
        leads = f"{leader[0]} leads (epoch {epoch})" if leader is not None else "nobody leads"
        if op.f == "elected" and leader is None:
            return f"elected {op.process} with epoch {op.result} after epoch {last}"
        if op.f == "act":
            return f"act by {op.process} with epoch {op.argument} while {leads}"
        return f"{op.f} of {whose(op)} while {leads}"


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
