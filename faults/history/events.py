"""Reading a history: its events validated, paired into operations, split by key.

An operation is an invoke and the one completion of the same process that follows it (by time:
the events of several writers' files need not be sorted). Anything else is :class:`Malformed`,
with the line (or event number) that shows it: the checker says nothing about a history it
cannot read as one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

FIELDS = ("process", "type", "f", "key", "value", "time")
KINDS = ("invoke", "ok", "fail", "info")


class Malformed(ValueError):
    """The history cannot be read as one: ``line`` (1-based) and why."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.why = why


def freeze(value: Any) -> Any:
    """A JSON value made hashable (lists as tuples, objects as sorted item tuples), so that a
    model's states can hold it."""
    if isinstance(value, list):
        return tuple(freeze(each) for each in value)
    if isinstance(value, dict):
        return tuple(sorted((key, freeze(each)) for key, each in value.items()))
    return value


class Op:
    """One operation: who, what, its invoke value and completion value, how it ended (``ok``,
    ``fail`` or ``info``; an invoke never completed is ``info``) and when (ns)."""

    __slots__ = ("argument", "complete", "f", "invoke", "kind", "line", "process", "result")

    def __init__(self, process: int | str, f: str, argument: Any, invoke: int, line: int) -> None:
        self.process = process
        self.f = f
        self.argument = argument
        self.invoke = invoke
        self.line = line
        self.kind = "info"
        self.result: Any = None
        self.complete: int | None = None

    @property
    def value(self) -> Any:
        """What the operation carried: its completion's value when it has one, else its
        invoke's (a write's [token, data], an act's epoch, an expire's holder)."""
        return self.argument if self.result is None else self.result

    def describe(self) -> str:
        """One line: process, f, value, invoke and completion times."""
        value = json.dumps(self.value, default=str)
        end = "never completed" if self.complete is None else f"{self.kind} {self.complete}"
        return f"process {self.process}  {self.f} {value}  invoke {self.invoke}, {end}"


def parse(line: str, number: int) -> dict[str, Any]:
    """One line of a history file as an event."""
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise Malformed(number, f"not JSON ({exc})") from None
    if not isinstance(event, dict):
        raise Malformed(number, "not a JSON object")
    return event


def read(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The events of a history file with their line numbers (blank lines skipped)."""
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield number, parse(line, number)


def validate(event: dict[str, Any], number: int, names: frozenset[str]) -> None:
    """Every field there and of its type, ``f`` one the model knows."""
    for field in FIELDS:
        if field not in event:
            raise Malformed(number, f"no {field!r} field")
    process, kind, f, key, stamp = (event[k] for k in ("process", "type", "f", "key", "time"))
    if isinstance(process, bool) or not isinstance(process, int | str):
        raise Malformed(number, f"process {process!r} is neither an integer nor a string")
    if kind not in KINDS:
        raise Malformed(number, f"type {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(key, str):
        raise Malformed(number, f"key {key!r} is not a string")
    if isinstance(stamp, bool) or not isinstance(stamp, int):
        raise Malformed(number, f"time {stamp!r} is not an integer (ns)")
    if f not in names:
        raise Malformed(number, f"f {f!r} is not an operation of this model ({', '.join(names)})")


def operations(
    events: Iterable[tuple[int, dict[str, Any]]], names: frozenset[str]
) -> dict[str, list[Op]]:
    """The operations of each key, ordered by invoke time; ``names``: the model's ``f``s."""
    valid = []
    for number, event in events:
        validate(event, number, names)
        valid.append((event["time"], number, event))
    valid.sort(key=lambda each: each[:2])
    open_ops: dict[int | str, tuple[str, Op]] = {}
    keys: dict[str, list[Op]] = {}
    for stamp, number, event in valid:
        process, key = event["process"], event["key"]
        outstanding = open_ops.get(process)
        if event["type"] == "invoke":
            if outstanding is not None:
                raise Malformed(
                    number,
                    f"process {process} invokes {event['f']} while its {outstanding[1].f} of "
                    f"line {outstanding[1].line} is outstanding",
                )
            op = Op(process, event["f"], freeze(event["value"]), stamp, number)
            open_ops[process] = (key, op)
            keys.setdefault(key, []).append(op)
            continue
        if outstanding is None:
            raise Malformed(
                number,
                f"{event['type']} of {event['f']} by process {process}, "
                "which has no operation outstanding",
            )
        held_key, op = outstanding
        if (held_key, op.f) != (key, event["f"]):
            raise Malformed(
                number,
                f"{event['type']} of {event['f']} on {key!r} by process {process}, whose "
                f"outstanding operation is {op.f} on {held_key!r} (line {op.line})",
            )
        del open_ops[process]
        op.kind, op.result, op.complete = event["type"], freeze(event["value"]), stamp
    return keys
