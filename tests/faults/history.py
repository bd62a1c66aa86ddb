"""Histories written by hand for the checker's tests: an operation in one call."""

from __future__ import annotations

from typing import Any

from faults.history import Verdict, check_events

Event = dict[str, Any]
#: A completion value that is the invoke's value (a write's [token, data], an expire's holder).
SAME = object()


def event(process: int | str, kind: str, f: str, value: Any, at: int, key: str = "k") -> Event:
    return {"process": process, "type": kind, "f": f, "key": key, "value": value, "time": at}


def op(
    process: int | str,
    f: str,
    start: int,
    end: int | None = None,
    kind: str = "ok",
    value: Any = None,
    result: Any = SAME,
    key: str = "k",
) -> list[Event]:
    """An invoke at ``start`` and, unless ``end`` is None, its completion then."""
    events = [event(process, "invoke", f, value, start, key)]
    if end is not None:
        events.append(event(process, kind, f, value if result is SAME else result, end, key))
    return events


def expire(
    holder: int, start: int, key: str = "k", kind: str = "info", acquired: int | None = None
) -> list[Event]:
    """The recorder's expire of ``holder``'s hold: invoked at the earliest the lease ends; with
    ``acquired`` (the invoke time of the acquire that granted it) it ends that hold only."""
    value = holder if acquired is None else [holder, acquired]
    return op(f"{holder}/lease", "expire", start, start + 1, kind, value=value, key=key)


def check(model: str, *ops: list[Event]) -> Verdict:
    return check_events([each for events in ops for each in events], model)
