"""How ``manage.py locks`` shows what it found: table cells (every text made safe to show),
JSON objects, progress bars."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from django_redis_lock.display import safe_text
from django_redis_lock.ops.records import LockInfo
from django_redis_lock.stats import LockStats, duration

# Rows whose widths set the table's columns; longer cells later are cut.
WIDTH_SAMPLE = 500
MAX_WIDTH = 60
COLUMNS = ("NAME", "TTL", "OWNER", "LABEL", "ACQUIRED", "TOKEN")


def as_json(info: LockInfo) -> dict[str, Any]:
    """The JSON object of one held lock (ttl null: the key has no expiry)."""
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
        **({"limit": info.limit} if info.limit is not None else {}),
    }


def columns(info: LockInfo) -> tuple[str, ...]:
    """The table's columns: a quorum's locks add the primaries that hold each."""
    return (*COLUMNS, "PRIMARIES") if info.primaries else COLUMNS


def cells(info: LockInfo) -> tuple[str, ...]:
    acquired = info.acquired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ttl = f"{info.ttl:.1f}s" if math.isfinite(info.ttl) else "no expiry"
    cells = [info.shown_name, ttl, info.owner, info.label or "-", acquired]
    cells.append(str(info.fencing_token))
    if info.primaries:
        cells.append(", ".join(info.primaries))
    return tuple(safe_text(cell) for cell in cells)


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


def stats_cells(stats: LockStats) -> tuple[str, ...]:
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
    )
    return tuple(safe_text(cell) for cell in cells)


def bar(done: int, total: int | None, width: int = 30) -> str:
    """A progress bar when the total is known, else the count."""
    if not total:
        return f"{done}"
    filled = round(width * min(done, total) / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def line(cells: Iterable[str], widths: list[int]) -> str:
    """One table line: each cell cut to its column's width, and padded."""
    padded = (
        (cell if len(cell) <= width else cell[: width - 1] + "…").ljust(width)
        for cell, width in zip(cells, widths, strict=True)
    )
    return "  ".join(padded).rstrip()


def quoted(name: str) -> str:
    return f"'{safe_text(name)}'"
