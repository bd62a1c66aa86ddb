"""The charts of the admin's statistics page, as the data its templates draw as inline SVG:
a small histogram per lock name (hold or wait times, a bar per non-empty bucket) and the most
contended names. No script and no charting library: the server draws, in the admin's colours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from django_redis_lock.display import counted
from django_redis_lock.stats import BOUNDS, LockStats, bucket_label, bucket_of, duration

#: Names in the chart of the most contended locks.
CONTENDED_TOP = 10
# A small histogram: a bar per bucket, each this wide with this gap, this tall at most.
_BAR, _GAP, _HISTOGRAM_HEIGHT = 4, 1, 36
# The contention chart: each name's row (its name above its bar) and how long the bar may get
# (a part of the chart's width: the count follows it).
_CONTENTION_ROW, _CONTENTION_BAR_PERCENT = 30, 85
# Names in the contention chart are cut shorter than in the table: they run in one line.
_CHART_TEXT_LIMIT = 60


def _number(value: float) -> str:
    """A coordinate for SVG: never localised (a decimal comma would break it)."""
    return f"{value:.1f}".removesuffix(".0")


def _timeout_x(timeout: float) -> float:
    """Where ``timeout`` (seconds) falls on a histogram's axis: in its bucket, on a log scale."""
    index = bucket_of(timeout * 1000)
    left = index * (_BAR + _GAP)
    if index == 0 or index >= len(BOUNDS):  # unbounded on one side: its edge
        return left
    low, high = BOUNDS[index - 1], BOUNDS[index]
    return left + (_BAR + _GAP) * math.log(timeout / low) / math.log(high / low)


def histogram(
    counts: Sequence[int], what: str, of: str, timeout: float | None = None
) -> dict[str, Any]:
    """What the template draws of a histogram: a bar per non-empty bucket (as tall as its count
    against the largest), the bucket and count as its tooltip, the same as text for assistive
    technology, and where the timeout falls (hold histograms)."""
    tallest = max(counts, default=0)
    bars = []
    for index, count in enumerate(counts):
        if not count:
            continue
        height = max(1.0, count / tallest * _HISTOGRAM_HEIGHT)  # the smallest still shows
        bars.append(
            {
                "x": _number(index * (_BAR + _GAP)),
                "y": _number(_HISTOGRAM_HEIGHT - height),
                "height": _number(height),
                "label": f"{bucket_label(index)}: {counted(count, what)}",
            }
        )
    width = len(counts) * (_BAR + _GAP) - _GAP
    marker = None
    if timeout:
        marker = {"x": _number(_timeout_x(timeout)), "label": f"timeout {duration(timeout)}"}
    text = "; ".join(bar["label"] for bar in bars) or f"no {what}s recorded"
    if marker:
        text += f"; {marker['label']}"
    return {
        "title": f"{what.capitalize()} times of {of}",
        "text": text,
        "bars": bars,
        "bar_width": _number(_BAR),
        "step": _number(_BAR + _GAP),
        "width": _number(width),
        "height": _number(_HISTOGRAM_HEIGHT + 2),  # the baseline below the bars
        "baseline": _number(_HISTOGRAM_HEIGHT + 1),
        "marker": marker,
    }


def contention(found: Sequence[LockStats], shown: Callable[..., str]) -> dict[str, Any] | None:
    """What the template draws of the most contended names (by busy answers) among ``found``,
    or None when no acquire found its lock held."""
    top = sorted((s for s in found if s.busy), key=lambda s: (-s.busy, s.name))[:CONTENDED_TOP]
    if not top:
        return None
    most = top[0].busy
    rows: list[dict[str, Any]] = []
    for at, stats in enumerate(top):
        length = stats.busy / most * _CONTENTION_BAR_PERCENT
        top_y = at * _CONTENTION_ROW
        rows.append(
            {
                "name": shown(stats.name, _CHART_TEXT_LIMIT),
                "label": f"{shown(stats.name)}: {counted(stats.busy, 'busy answer')}, "
                f"{counted(stats.acquisitions, 'acquisition')}",
                "busy": stats.busy,
                "text_y": _number(top_y + 12),
                "bar_y": _number(top_y + 16),
                "width": _number(max(0.5, length)),
                "count_x": _number(max(0.5, length) + 1),
                "count_y": _number(top_y + 26),
            }
        )
    return {
        "rows": rows,
        "height": _number(len(rows) * _CONTENTION_ROW),
        "text": "; ".join(row["label"] for row in rows),
    }
