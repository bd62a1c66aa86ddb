"""How ``manage.py locks`` shows what it found: table cells (every text made safe to show),
JSON objects, progress bars."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from django_redis_lock.display import safe_text
from django_redis_lock.ops.records import LockInfo, unique_mode
from django_redis_lock.stats import LockStats, duration

# Rows whose widths set the table's columns; longer cells later are cut.
WIDTH_SAMPLE = 500
#: Tables are as wide as the terminal, 120 columns when output is not one (a pipe, a file);
#: never narrower than 80. Cells cut to fit end up whole in ``show`` and ``--json``.
TABLE_WIDTH, NARROWEST = 120, 80
COLUMNS = ("NAME", "TTL", "OWNER", "LABEL", "ACQUIRED", "TOKEN")
# The columns that give up width when a table does not fit: texts, cut in the middle.
_FLEXIBLE = frozenset({"NAME", "OWNER", "LABEL"})
_SMALLEST_FLEXIBLE = 12
# What a shown name ends with when a semaphore or read/write lock holds it: kept whole.
_KIND = re.compile(
    r" \[(?:semaphore(?: of [0-9]+)?|read|write|leader|rate [0-9]+/[smhd](?:, burst [0-9]+)?)\]$"
)


def terminal_width(stream: TextIO | Any, default: int) -> int:
    """``COLUMNS`` when set, else the width of ``stream`` if it is a terminal, else
    ``default``: output to a pipe or a file is not shaped by the terminal that started it."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns):
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # an OutputWrapper has no fileno
            pass
    return default


def as_json(info: LockInfo) -> dict[str, Any]:
    """The JSON object of one held lock (ttl null: the key has no expiry), or of an active
    rate limit (kind "rate": no holder, so no token, owner nor start)."""
    if info.rate is not None:
        fill = info.rate
        return {
            **dict.fromkeys(("fencing_token", "owner", "label", "acquired_at")),
            "name": info.name,
            "kind": "rate",
            "rate": fill.rate,
            "burst": fill.burst,
            "fill": round(fill.fill, 3),
            "capacity": fill.capacity,
            "queued": fill.queued,
            "ttl": info.ttl,
        }
    return {
        "name": info.name,
        "fencing_token": info.fencing_token,
        "owner": info.owner,
        "label": info.label,
        "acquired_at": info.acquired_at.isoformat(),
        "ttl": info.ttl if math.isfinite(info.ttl) else None,
        **({"primaries": list(info.primaries)} if info.primaries else {}),
        **({"unanswered": list(info.unanswered)} if info.unanswered else {}),
        **({"kind": info.kind} if info.kind != "lock" else {}),
        **({"leader": True, "epoch": info.fencing_token} if info.leadership else {}),
        **({"limit": info.limit} if info.limit is not None else {}),
        **({"unique": unique_mode(info.label) or "default"} if info.unique else {}),
    }


def columns(info: LockInfo) -> tuple[str, ...]:
    """The table's columns: a quorum's locks add the primaries that hold each."""
    return (*COLUMNS, "PRIMARIES") if info.primaries else COLUMNS


def cells(info: LockInfo) -> tuple[str, ...]:
    if info.rate is not None:  # no holder: how full it is in the label's column
        cells = [info.shown_name, f"{info.ttl:.1f}s", "-", info.rate.shown, "-", "-"]
        return tuple(safe_text(cell) for cell in cells)
    acquired = info.acquired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ttl = f"{info.ttl:.1f}s" if math.isfinite(info.ttl) else "no expiry"
    cells = [info.shown_name, ttl, info.owner, info.label or "-", acquired]
    cells.append(str(info.fencing_token))
    if info.primaries:
        cells.append(", ".join(info.primaries))
    return tuple(safe_text(cell) for cell in cells)


def shown_fields(info: LockInfo) -> list[tuple[str, str]]:
    """What ``locks show`` prints of one hold or rate limit: (label, safe text) pairs."""
    if info.rate is None:
        return list(zip((c.lower() for c in columns(info)), cells(info), strict=True))
    fill = info.rate
    return [
        ("name", safe_text(info.name)),
        ("kind", f"rate limit, {info.held_as}"),
        ("used", f"{fill.shown} (the burst and one call)"),
        ("drains in", f"{info.ttl:.3f}s"),
    ]


STATS_COLUMNS = (
    "NAME",
    "ACQ",
    "BUSY",
    "LOST",
    "FORCED",
    "HOLD P50",
    "P99",
    "MAX",
    "WAIT P50",
    "P99",
    "TIMEOUT",
    "SUGGESTED",
)


def seconds(value: float | None) -> str:
    return "-" if value is None else duration(value)


#: The columns of ``locks stats`` when a name there counts rate limit calls.
RATE_COLUMNS = ("ADMITTED", "LIMITED")
#: The column of ``locks stats`` when a name there counts ``cache_once`` stampedes avoided.
AVOIDED_COLUMNS = ("AVOIDED",)


def stats_cells(stats: LockStats, rates: bool = False, avoided: bool = False) -> tuple[str, ...]:
    """A row of ``locks stats``; with ``rates``, the calls of the rate limit too; with
    ``avoided``, the stampedes its ``cache_once`` avoided."""
    suggested = seconds(stats.suggested_timeout)
    cells = (
        stats.name,
        str(stats.acquisitions),
        str(stats.busy),
        str(stats.lost),
        str(stats.forced),
        seconds(stats.hold_p50),
        seconds(stats.hold_p99),
        seconds(stats.hold_max),
        seconds(stats.wait_p50),
        seconds(stats.wait_p99),
        seconds(stats.timeout),
        f"{suggested} !" if stats.warnings else suggested,
        *((str(stats.admitted), str(stats.limited)) if rates else ()),
        *((str(stats.avoided),) if avoided else ()),
    )
    return tuple(safe_text(cell) for cell in cells)


def bar(done: int, total: int | None, width: int = 30) -> str:
    """A progress bar when the total is known, else the count."""
    if not total:
        return f"{done}"
    filled = round(width * min(done, total) / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def widths(heads: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Column widths for ``rows`` within ``width`` characters: each column as wide as its
    widest cell, the text columns narrowed (the widest first) when that does not fit."""
    natural = [max(len(head), *(len(row[i]) for row in rows)) for i, head in enumerate(heads)]
    flexible = sorted(
        (i for i, head in enumerate(heads) if head in _FLEXIBLE), key=lambda i: natural[i]
    )
    fixed = sum(w for i, w in enumerate(natural) if i not in flexible) + 2 * (len(heads) - 1)
    budget = max(width - fixed, _SMALLEST_FLEXIBLE * len(flexible))
    sized = list(natural)
    for done, i in enumerate(flexible):  # the narrow ones take what they need, first
        share = budget // (len(flexible) - done)
        sized[i] = min(natural[i], max(share, len(heads[i])))
        budget -= sized[i]
    return sized


def cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters: cut in the middle, so its start and its end (a
    thread, a task id) show; a holder's kind (``[semaphore of 3]``) stays whole."""
    if len(text) <= width:
        return text
    kind = _KIND.search(text)
    tail = kind[0] if kind and len(kind[0]) < width - 4 else ""
    room = width - len(tail) - 1
    head = text[: len(text) - len(tail)]
    return head[: room - room // 2] + "…" + head[len(head) - room // 2 :] + tail


def line(cells: Iterable[str], widths: list[int]) -> str:
    """One table line: each cell cut to its column's width, and padded."""
    padded = (cut(cell, width).ljust(width) for cell, width in zip(cells, widths, strict=True))
    return "  ".join(padded).rstrip()


def quoted(name: str) -> str:
    return f"'{safe_text(name)}'"
